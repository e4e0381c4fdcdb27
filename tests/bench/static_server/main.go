// Static files over HTTP or HTTPS with Go's net/http (standard library only): the benches' floor, what a native
// server does on this machine for the same bytes (tests/bench/static_server/__init__.py).
//
//	static_server <directory> <host:port> [<cert.pem> <key.pem>]
package main

import (
	"log"
	"net/http"
	"os"
)

func main() {
	files := http.FileServer(http.Dir(os.Args[1]))
	switch len(os.Args) {
	case 3:
		log.Fatal(http.ListenAndServe(os.Args[2], files))
	case 5:
		log.Fatal(http.ListenAndServeTLS(os.Args[2], os.Args[3], os.Args[4], files))
	default:
		log.Fatal("usage: static_server <directory> <host:port> [<cert.pem> <key.pem>]")
	}
}
