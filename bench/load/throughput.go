package main

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// throughput is the c=16 comparison alone (-throughput): the stateless
// floor and perch are measured in turn, rounds times, each on a fresh
// session set, and every round prints both req/s, their ratio and each
// server's CPU time per turn. CPU per turn is read from the kernel's
// accounting of the server process (and of this one, which runs the fake
// provider and the clients), so unlike req/s it does not move much
// with what else the machine is running.
func throughput(w io.Writer, bin, floorBin string, n16, rounds int) error {
	b, done, err := setUp(bin, floorBin)
	if err != nil {
		return err
	}
	defer done()
	base, home, floorBin, client := b.base, b.home, b.floorBin, b.client
	fport := freePort()
	furl := fmt.Sprintf("http://127.0.0.1:%d", fport)
	fl, err := launch(client, []string{floorBin, "-addr", fmt.Sprintf("127.0.0.1:%d", fport), "-provider", base, "-dir", home}, nil, furl, "")
	if err != nil {
		return err
	}
	defer fl.stop()
	url := writeConfig(home, base)
	p, err := launch(client, []string{bin, "gateway"}, []string{"PERCH_HOME=" + home}, url, "bench-token-0123456789abcdef")
	if err != nil {
		return err
	}
	defer p.stop()
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	defer tw.Flush()
	fmt.Fprintf(tw, "c=16, %d requests a round\tfloor req/s\tperch req/s\tratio\tCPU/turn: floor\tperch\tthis process with floor\twith perch\t\n", n16)
	for r := range rounds {
		var rps [2]float64
		var cpu, self [2]time.Duration
		for i, s := range []*server{fl, p} {
			before, selfBefore := cpuTime(s.cmd.Process.Pid), cpuTime(os.Getpid())
			_, d, err := load(client, s, 16, n16)
			if err != nil {
				return err
			}
			rps[i] = float64(n16) / d.Seconds()
			cpu[i] = (cpuTime(s.cmd.Process.Pid) - before) / time.Duration(n16)
			self[i] = (cpuTime(os.Getpid()) - selfBefore) / time.Duration(n16)
		}
		us := func(d time.Duration) string { return fmt.Sprintf("%.0f µs", float64(d.Nanoseconds())/1e3) }
		fmt.Fprintf(tw, "round %d\t%.0f\t%.0f\t%.2fx\t%s\t%s\t%s\t%s\t\n", r+1, rps[0], rps[1], rps[1]/rps[0], us(cpu[0]), us(cpu[1]), us(self[0]), us(self[1]))
	}
	fmt.Fprintf(tw, "peak RSS\t%.1f MB\t%.1f MB\t\t\t\t\t\t\n", float64(fl.rssKB("VmHWM"))/1024, float64(p.rssKB("VmHWM"))/1024)
	return nil
}

// cpuTime is the user and system CPU time process pid has used, from
// /proc/<pid>/stat (in clock ticks of 1/100 s on Linux).
func cpuTime(pid int) time.Duration {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// The command name, field 2, may hold spaces; the fields after its
	// closing parenthesis are fixed.
	s := string(data)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * 10 * time.Millisecond
}

// rounds16 is how many alternating c=16 rounds the full run compares.
var rounds16 = 3

// round16 is one alternating c=16 round: the floor's and perch's req/s.
type round16 struct{ floor, perch float64 }

type rounds []round16

// alternate16 runs n requests at c=16 against the floor, then perch, n
// times over, both already running.
func alternate16(client *http.Client, floor, perch *server, n, count int) (rounds, error) {
	var rs rounds
	for range max(count, 1) {
		var r round16
		for i, s := range []*server{floor, perch} {
			_, d, err := load(client, s, 16, n)
			if err != nil {
				return nil, err
			}
			rps := float64(n) / d.Seconds()
			if i == 0 {
				r.floor = rps
			} else {
				r.perch = rps
			}
		}
		rs = append(rs, r)
	}
	return rs, nil
}

func medianOf(v []float64) float64 {
	v = slices.Clone(v)
	slices.Sort(v)
	if len(v) == 0 {
		return 0
	}
	if len(v)%2 == 1 {
		return v[len(v)/2]
	}
	return (v[len(v)/2-1] + v[len(v)/2]) / 2
}

func (rs rounds) collect(f func(round16) float64) []float64 {
	out := make([]float64, len(rs))
	for i, r := range rs {
		out[i] = f(r)
	}
	return out
}

// median is the median of the rounds' ratios (perch over floor).
func (rs rounds) median() float64 {
	return medianOf(rs.collect(func(r round16) float64 { return r.perch / r.floor }))
}

func (rs rounds) perchMedian() float64 {
	return medianOf(rs.collect(func(r round16) float64 { return r.perch }))
}

func (rs rounds) floorMedian() float64 {
	return medianOf(rs.collect(func(r round16) float64 { return r.floor }))
}

func (rs rounds) String() string {
	parts := make([]string, len(rs))
	for i, r := range rs {
		parts[i] = fmt.Sprintf("%.0f/%.0f %.2fx", r.perch, r.floor, r.perch/r.floor)
	}
	return strings.Join(parts, ", ")
}
