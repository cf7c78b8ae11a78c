// etcd for tests: the upstream server, built from the Go module proxy. The etcd
// server module has replace directives, so it cannot be `go install`ed directly.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
