package version

import (
	"fmt"
	"net/http"
	_ "net/http/pprof"
	"os"
	"time"
)

var markOn = os.Getenv("XMARK") != ""

func Mark(name string) {
	if markOn {
		fmt.Fprintf(os.Stderr, "MARK %d %s\n", time.Now().UnixNano(), name)
	}
}

func init() {
	if a := os.Getenv("XPPROF"); a != "" {
		go http.ListenAndServe(a, nil)
	}
}
