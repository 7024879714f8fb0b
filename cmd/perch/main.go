// Command perch is the Perch appliance: a chat-driven AI agent gateway for
// small Linux boards. See README.md.
package main

import (
	"fmt"
	"os"

	"github.com/perchhq/perch/appliance/version"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "version" {
		fmt.Println(version.Get())
		return
	}
	fmt.Fprintln(os.Stderr, "perch: the gateway is being assembled; only 'perch version' works in this build")
	os.Exit(1)
}
