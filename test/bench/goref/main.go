// The Go reference of the ignition-server benchmark: GET /ignition over TLS with the standard library only,
// the same check as Kindling's hot path (a bearer token looked up in a map, the NodePool header compared
// with the token's pool) and the same bytes, held in memory. It stands for "as fast as Go serves it".
package main

import (
	"crypto/tls"
	"encoding/json"
	"flag"
	"log"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"
)

// site is one token: the pool it belongs to and the payload file it is answered with.
type site struct {
	Token   string `json:"token"`
	Pool    string `json:"pool"`
	Payload string `json:"payload"`
}

type answer struct {
	pool   string
	body   []byte
	length string
}

func load(path string) map[string]answer {
	raw, err := os.ReadFile(path)
	if err != nil {
		log.Fatal(err)
	}
	var sites []site
	if err := json.Unmarshal(raw, &sites); err != nil {
		log.Fatal(err)
	}
	bodies := map[string][]byte{}
	byToken := make(map[string]answer, len(sites))
	for _, s := range sites {
		body, ok := bodies[s.Payload]
		if !ok {
			if body, err = os.ReadFile(s.Payload); err != nil {
				log.Fatal(err)
			}
			bodies[s.Payload] = body
		}
		byToken[s.Token] = answer{pool: s.Pool, body: body, length: strconv.Itoa(len(body))}
	}
	return byToken
}

func main() {
	addr := flag.String("addr", "127.0.0.1:0", "listen address")
	cert := flag.String("cert", "", "serving certificate (PEM)")
	key := flag.String("key", "", "serving key (PEM)")
	tokens := flag.String("tokens", "", "JSON list of {token, pool, payload file}")
	flag.Parse()
	byToken := load(*tokens)
	http.HandleFunc("/ignition", func(w http.ResponseWriter, r *http.Request) {
		token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		a, known := byToken[token]
		if r.Method != http.MethodGet || !ok || !known {
			w.Header().Set("Www-Authenticate", `Bearer realm="ignition"`)
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		if pool := r.Header.Values("NodePool"); len(pool) > 0 && pool[0] != a.pool {
			http.Error(w, "forbidden", http.StatusForbidden)
			return
		}
		h := w.Header()
		h["Content-Type"] = []string{"application/vnd.coreos.ignition+json;version=3.3.0"}
		h["Content-Length"] = []string{a.length}
		h["Cache-Control"] = []string{"no-store"}
		_, _ = w.Write(a.body)
	})
	server := &http.Server{
		Addr:              *addr,
		ReadHeaderTimeout: 5 * time.Second,
		IdleTimeout:       5 * time.Second,
		// No session tickets, as Kindling's serving port (support/src/https.ts): an Ignition client keeps no
		// session, so building tickets is work neither server should be measured with.
		TLSConfig: &tls.Config{MinVersion: tls.VersionTLS12, SessionTicketsDisabled: true},
		ErrorLog:  log.New(os.Stderr, "", 0),
	}
	log.Fatal(server.ListenAndServeTLS(*cert, *key))
}
