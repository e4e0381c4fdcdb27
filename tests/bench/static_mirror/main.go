// A static network mirror over HTTPS with Go's net/http (standard library only): the bench's floor for what any
// network mirror can do for a warm `terraform init` on this machine (tests/bench/bench_provider_cache.py).
//
//	static_mirror <directory> <cert.pem> <key.pem> <host:port>
package main

import (
	"log"
	"net/http"
	"os"
)

func main() {
	if len(os.Args) != 5 {
		log.Fatal("usage: static_mirror <directory> <cert.pem> <key.pem> <host:port>")
	}
	log.Fatal(http.ListenAndServeTLS(os.Args[4], os.Args[2], os.Args[3], http.FileServer(http.Dir(os.Args[1]))))
}
