// The benches' floor, with Go's net/http (standard library only): what a native server does on this machine for
// the same bytes (tests/bench/static_server/__init__.py).
//
//	static_server <directory> <host:port> [<cert.pem> <key.pem>]   static files over HTTP, or HTTPS
//	static_server -proxy <upstream URL> <host:port>                a reverse proxy: one more hop, streamed
package main

import (
	"log"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
)

func main() {
	if len(os.Args) == 4 && os.Args[1] == "-proxy" {
		upstream, err := url.Parse(os.Args[2])
		if err != nil {
			log.Fatal(err)
		}
		proxy := httputil.NewSingleHostReverseProxy(upstream)
		proxy.FlushInterval = -1 // stream both ways as the bytes come, as the datastore does
		log.Fatal(http.ListenAndServe(os.Args[3], proxy))
	}
	files := http.FileServer(http.Dir(os.Args[1]))
	switch len(os.Args) {
	case 3:
		log.Fatal(http.ListenAndServe(os.Args[2], files))
	case 5:
		log.Fatal(http.ListenAndServeTLS(os.Args[2], os.Args[3], os.Args[4], files))
	default:
		log.Fatal("usage: static_server <directory> <host:port> [<cert.pem> <key.pem>] | -proxy <upstream> <host:port>")
	}
}
