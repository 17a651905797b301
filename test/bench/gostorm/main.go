// The boot-storm client of the ignition-server benchmark: hosts booting as they do, each one Ignition
// process with its own HTTP client (Go net/http and crypto/tls, as Ignition fetches its config), so each
// opens a new TLS connection with no session to resume (Ignition's tls.Config sets no ClientSessionCache).
// The hosts arrive evenly spread over --spread; each retries a 5xx or a failed connection with Ignition's
// backoff (200 ms doubling to 5 s) until it has its 200 or --deadline passes. It prints one JSON object: per
// host, when it arrived (from the storm's start), the time from its arrival to the first and to the last byte of
// its 200 (-1 when lost), its client-side handshake time, and the statuses seen.
//
// --mode handshake opens --n connections, --concurrency at a time, each closed right after its handshake: what
// the server spends on a handshake alone is its CPU time over that run divided by n.
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"flag"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptrace"
	"os"
	"strconv"
	"sync"
	"time"
)

// host is one booting machine: the headers of its Ignition stub.
type host struct {
	Headers map[string]string `json:"headers"`
}

type result struct {
	ArrivedMs   []float64      `json:"arrivedMs"`
	TTFBMs      []float64      `json:"ttfbMs"`
	TTLBMs      []float64      `json:"ttlbMs"`
	HandshakeMs []float64      `json:"handshakeMs"`
	Bytes       []int64        `json:"bytes"`
	Statuses    map[string]int `json:"statuses"`
	TookMs      float64        `json:"tookMs"`
}

// tlsConfig is Ignition's: the stub's CA, and no session cache. The key exchanges offered are those of the
// Go release Debian's ignition 2.14 is built with (Go 1.19: X25519 first, no post-quantum hybrid).
func tlsConfig(caFile string) *tls.Config {
	pem, err := os.ReadFile(caFile)
	if err != nil {
		log.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		log.Fatal("no CA certificate in " + caFile)
	}
	return &tls.Config{
		RootCAs:          pool,
		ServerName:       "localhost",
		CurvePreferences: []tls.CurveID{tls.X25519, tls.CurveP256, tls.CurveP384, tls.CurveP521},
	}
}

const ms = float64(time.Millisecond)

type outcome struct {
	ttfb, ttlb, handshake float64
	bytes                 int64
}

// boot fetches like one Ignition process: its own transport, Ignition's timeouts and backoff.
func boot(url string, h host, cfg *tls.Config, deadline time.Time, seen func(string)) outcome {
	transport := &http.Transport{
		TLSClientConfig:       cfg.Clone(),
		ResponseHeaderTimeout: 10 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		DialContext:           (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
	}
	defer transport.CloseIdleConnections()
	client := &http.Client{Transport: transport}
	arrived := time.Now()
	lost := outcome{ttfb: -1, ttlb: -1, handshake: -1}
	backoff := 100 * time.Millisecond
	for time.Now().Before(deadline) {
		var hsStart time.Time
		trace := &httptrace.ClientTrace{
			TLSHandshakeStart: func() { hsStart = time.Now() },
			TLSHandshakeDone: func(tls.ConnectionState, error) {
				if lost.handshake < 0 {
					lost.handshake = float64(time.Since(hsStart)) / ms
				}
			},
		}
		req, _ := http.NewRequestWithContext(httptrace.WithClientTrace(context.Background(), trace), "GET", url, nil)
		req.Header.Set("User-Agent", "Ignition/2.14.0")
		for k, v := range h.Headers {
			req.Header.Set(k, v)
		}
		resp, err := client.Do(req)
		if err != nil {
			seen("error")
		} else {
			first := time.Since(arrived)
			n, readErr := io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			seen(strconv.Itoa(resp.StatusCode))
			if resp.StatusCode == http.StatusOK && readErr == nil {
				return outcome{float64(first) / ms, float64(time.Since(arrived)) / ms, lost.handshake, n}
			}
			if resp.StatusCode < 500 {
				return lost
			}
		}
		backoff = min(backoff*2, 5*time.Second)
		time.Sleep(backoff)
	}
	return lost
}

func storm(url string, hosts []host, cfg *tls.Config, spread, limit time.Duration) result {
	r := result{
		ArrivedMs:   make([]float64, len(hosts)),
		TTFBMs:      make([]float64, len(hosts)),
		TTLBMs:      make([]float64, len(hosts)),
		HandshakeMs: make([]float64, len(hosts)),
		Bytes:       make([]int64, len(hosts)),
		Statuses:    map[string]int{},
	}
	var mu sync.Mutex
	seen := func(s string) {
		mu.Lock()
		r.Statuses[s]++
		mu.Unlock()
	}
	start := time.Now()
	deadline := start.Add(spread + limit)
	var wg sync.WaitGroup
	for i, h := range hosts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			time.Sleep(time.Until(start.Add(spread * time.Duration(i) / time.Duration(len(hosts)))))
			r.ArrivedMs[i] = float64(time.Since(start)) / ms
			o := boot(url, h, cfg, deadline, seen)
			r.TTFBMs[i], r.TTLBMs[i], r.HandshakeMs[i], r.Bytes[i] = o.ttfb, o.ttlb, o.handshake, o.bytes
		}()
	}
	wg.Wait()
	r.TookMs = float64(time.Since(start)) / ms
	return r
}

// handshakes opens n connections, concurrency at a time, each closed once its handshake is done.
func handshakes(addr string, cfg *tls.Config, n, concurrency int) result {
	r := result{HandshakeMs: make([]float64, n), Statuses: map[string]int{}}
	var mu sync.Mutex
	next := make(chan int)
	var wg sync.WaitGroup
	start := time.Now()
	for range concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				began := time.Now()
				conn, err := tls.Dial("tcp", addr, cfg)
				status := "handshake"
				if err != nil {
					status = "error"
				} else {
					r.HandshakeMs[i] = float64(time.Since(began)) / ms
					conn.Close()
				}
				mu.Lock()
				r.Statuses[status]++
				mu.Unlock()
			}
		}()
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	r.TookMs = float64(time.Since(start)) / ms
	return r
}

func main() {
	addr := flag.String("addr", "", "host:port of the serving port")
	ca := flag.String("ca", "", "CA certificate (PEM) of the serving certificate")
	hostsFile := flag.String("hosts", "", "JSON list of {headers} (mode storm)")
	mode := flag.String("mode", "storm", "storm or handshake")
	spread := flag.Duration("spread", 10*time.Second, "hosts arrive evenly over this time (mode storm)")
	limit := flag.Duration("deadline", 120*time.Second, "after the last arrival, a host without its 200 is lost")
	n := flag.Int("n", 1000, "connections (mode handshake)")
	concurrency := flag.Int("concurrency", 8, "connections at a time (mode handshake)")
	flag.Parse()
	cfg := tlsConfig(*ca)
	var r result
	if *mode == "handshake" {
		r = handshakes(*addr, cfg, *n, *concurrency)
	} else {
		raw, err := os.ReadFile(*hostsFile)
		if err != nil {
			log.Fatal(err)
		}
		var hosts []host
		if err := json.Unmarshal(raw, &hosts); err != nil {
			log.Fatal(err)
		}
		r = storm("https://"+*addr+"/ignition", hosts, cfg, *spread, *limit)
	}
	if err := json.NewEncoder(os.Stdout).Encode(r); err != nil {
		log.Fatal(err)
	}
}
