// Command coredns is CoreDNS with only the plugins the node test bed's Corefile uses (test/bed/src/node.ts):
// the stock build links every plugin and so every cloud SDK (route53, azure, clouddns, …), which made a cold
// build take about 15 minutes on two cores. A plugin added to that Corefile must be added to both lists here.
package main

import (
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/ready"
)

// directives keeps the relative order of CoreDNS's own list (core/dnsserver/zdirectives.go), which is the
// order a query passes through the plugins: cache must stay in front of kubernetes to answer from its cache.
var directives = []string{
	"ready",
	"health",
	"errors",
	"cache",
	"kubernetes",
}

func init() {
	dnsserver.Directives = directives
}

func main() {
	coremain.Run()
}
