// Command load measures a perch binary the way the brief states its targets:
// stripped size, exec-to-ready, idle RSS, /chat latency and throughput at
// concurrency 1 and 16 (one session per worker) against an instant local
// fake provider, and peak RSS under that load.
//
//	go run ./bench/load -bin bin/perch
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

func main() {
	bin := flag.String("bin", "bin/perch", "perch binary")
	n1 := flag.Int("n1", 2000, "requests at concurrency 1")
	n16 := flag.Int("n16", 20000, "requests at concurrency 16")
	settle := flag.Duration("settle", 2*time.Second, "wait after ready before reading the idle RSS")
	idle := flag.Duration("idle", 35*time.Second, "wait after the load before reading the RSS again (the gateway trims after 15-30 s idle)")
	flag.Parse()
	if err := run(os.Stdout, *bin, *n1, *n16, *settle, *idle); err != nil {
		fmt.Fprintln(os.Stderr, "load:", err)
		os.Exit(1)
	}
}

// fakeProvider answers every chat completion at once with a fixed reply.
func fakeProvider() (string, func()) {
	reply := []byte(`{"id":"x","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}`)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.Write(reply)
	})}
	go srv.Serve(ln)
	return "http://" + ln.Addr().String(), func() { srv.Close() }
}

func run(w io.Writer, bin string, n1, n16 int, settle, idleWait time.Duration) error {
	st, err := os.Stat(bin)
	if err != nil {
		return err
	}
	base, stopFake := fakeProvider()
	defer stopFake()
	home, err := os.MkdirTemp("", "perch-load-*")
	if err != nil {
		return err
	}
	defer os.RemoveAll(home)
	port := freePort()
	cfg := map[string]any{
		"gateway":   map[string]any{"host": "127.0.0.1", "port": port, "api_token": "bench"},
		"providers": map[string]any{"openrouter": map[string]any{"api_key": "k", "api_base": base}},
		"agents":    map[string]any{"defaults": map[string]any{"model": "openai/gpt-4o-mini"}},
	}
	data, _ := json.Marshal(cfg)
	os.WriteFile(filepath.Join(home, "config.json"), data, 0o600)
	url := fmt.Sprintf("http://127.0.0.1:%d", port)

	cmd := exec.Command(bin, "gateway")
	cmd.Env = append(os.Environ(), "PERCH_HOME="+home)
	cmd.Stdout, cmd.Stderr = io.Discard, io.Discard
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64, MaxIdleConns: 64}}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return err
	}
	defer func() { cmd.Process.Signal(syscall.SIGTERM); cmd.Wait() }()
	var ready time.Duration
	for {
		resp, err := client.Get(url + "/ready")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				ready = time.Since(start)
				break
			}
		}
		if time.Since(start) > 10*time.Second {
			return fmt.Errorf("not ready after 10s")
		}
		time.Sleep(200 * time.Microsecond)
	}
	time.Sleep(settle)
	idle := procKB(cmd.Process.Pid, "VmRSS")

	lat1, dur1, err := load(client, url, 1, n1)
	if err != nil {
		return err
	}
	lat16, dur16, err := load(client, url, 16, n16)
	if err != nil {
		return err
	}
	peak := procKB(cmd.Process.Pid, "VmHWM")
	// The gateway gives memory back after 15-30 s without a turn.
	time.Sleep(idleWait)
	after := procKB(cmd.Process.Pid, "VmRSS")

	fmt.Fprintf(w, "binary (stripped)      %.2f MiB  %s\n", float64(st.Size())/(1<<20), bin)
	fmt.Fprintf(w, "exec to /ready 200     %.1f ms\n", float64(ready.Microseconds())/1000)
	fmt.Fprintf(w, "idle RSS (after start) %.1f MB\n", float64(idle)/1024)
	fmt.Fprintf(w, "/chat c=1              %6.0f req/s  p50 %.3f ms  p99 %.3f ms  (%d requests)\n",
		float64(n1)/dur1.Seconds(), ms(pct(lat1, 50)), ms(pct(lat1, 99)), n1)
	fmt.Fprintf(w, "/chat c=16             %6.0f req/s  p50 %.3f ms  p99 %.3f ms  (%d requests)\n",
		float64(n16)/dur16.Seconds(), ms(pct(lat16, 50)), ms(pct(lat16, 99)), n16)
	fmt.Fprintf(w, "peak RSS               %.1f MB\n", float64(peak)/1024)
	fmt.Fprintf(w, "idle RSS %-4s after    %.1f MB\n", idleWait.Round(time.Second), float64(after)/1024)
	return nil
}

// load sends n /chat requests from c workers, each on its own session.
func load(client *http.Client, url string, c, n int) ([]time.Duration, time.Duration, error) {
	lats := make([]time.Duration, n)
	var next int
	var mu sync.Mutex
	var firstErr error
	var wg sync.WaitGroup
	start := time.Now()
	for w := 0; w < c; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			body := []byte(fmt.Sprintf(`{"message":"hello, how are you today?","session_key":"bench:c%d:w%d"}`, c, w))
			for {
				mu.Lock()
				i := next
				next++
				mu.Unlock()
				if i >= n {
					return
				}
				req, _ := http.NewRequest("POST", url+"/chat", bytes.NewReader(body))
				req.Header.Set("Authorization", "Bearer bench")
				req.Header.Set("Content-Type", "application/json")
				t := time.Now()
				resp, err := client.Do(req)
				if err == nil {
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode != 200 {
						err = fmt.Errorf("HTTP %d", resp.StatusCode)
					}
				}
				lats[i] = time.Since(t)
				if err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
					return
				}
			}
		}()
	}
	wg.Wait()
	return lats, time.Since(start), firstErr
}

func pct(l []time.Duration, p int) time.Duration {
	s := append([]time.Duration(nil), l...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[(len(s)-1)*p/100]
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func procKB(pid int, field string) int {
	data, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	for _, ln := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(ln, field+":") {
			f := strings.Fields(ln)
			if len(f) >= 2 {
				n, _ := strconv.Atoi(f[1])
				return n
			}
		}
	}
	return 0
}

func freePort() int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}
