//go:build pgoprofile

package main

// The profile that default.pgo is made from (make pgo): a build with this
// tag writes a CPU profile of `perch gateway` to $PERCH_CPUPROFILE.<pid>
// from its first package initialiser to its exit, so the profile holds the
// start as well as the turns. Shipped builds leave it out: runtime/pprof
// would add to every start and to the binary.

import (
	"fmt"
	"os"
	"runtime/pprof"
	"strconv"
)

func init() {
	path := os.Getenv("PERCH_CPUPROFILE")
	if path == "" || len(os.Args) < 2 || os.Args[1] != "gateway" {
		return
	}
	f, err := os.Create(path + "." + strconv.Itoa(os.Getpid()))
	if err == nil {
		err = pprof.StartCPUProfile(f)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "perch: PERCH_CPUPROFILE: %v\n", err)
		os.Exit(1)
	}
	atExit = func() {
		pprof.StopCPUProfile()
		if err := f.Close(); err != nil {
			fmt.Fprintf(os.Stderr, "perch: PERCH_CPUPROFILE: %v\n", err)
		}
	}
}
