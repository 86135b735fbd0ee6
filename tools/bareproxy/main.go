// Command bareproxy is the anchor of the proxy benchmark (tools/bench.sh,
// section proxy): Go's httputil.ReverseProxy and nothing else, so the cost
// of forwarding a request through one more HTTP hop on this machine is
// measured beside what asrprof's capturing proxy adds on top of it.
package main

import (
	"flag"
	"log"
	"net/http"
	"net/http/httputil"
	"net/url"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:18095", "listen address")
	target := flag.String("target", "http://127.0.0.1:18097", "upstream base URL")
	flag.Parse()
	u, err := url.Parse(*target)
	if err != nil {
		log.Fatal(err)
	}
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.Transport = &http.Transport{MaxIdleConnsPerHost: 256, DisableCompression: true}
	log.Fatal(http.ListenAndServe(*addr, rp))
}
