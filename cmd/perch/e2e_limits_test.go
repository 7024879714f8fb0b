package main

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// rssKiB reads a VmRSS-style field (kB) of pid from /proc.
func rssKiB(t *testing.T, pid int, field string) int {
	t.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), field+":"); ok {
			n, err := strconv.Atoi(strings.Fields(rest)[0])
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatalf("no %s in /proc/%d/status", field, pid)
	return 0
}

// halfOpen opens n connections from local address from to addr, each of
// which sends the start of a request and never finishes it (a slowloris
// client). It returns how many were established; Cleanup closes them.
func halfOpen(t *testing.T, addr, from string, n int) int {
	t.Helper()
	d := net.Dialer{Timeout: 2 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
	conns := make([]net.Conn, 0, n)
	t.Cleanup(func() {
		for _, c := range conns {
			c.Close()
		}
	})
	var mu sync.Mutex
	var wg sync.WaitGroup
	sem := make(chan struct{}, 64)
	for i := 0; i < n; i++ {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			c, err := d.Dial("tcp", addr)
			if err != nil {
				return
			}
			c.Write([]byte("GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: "))
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}()
	}
	wg.Wait()
	return len(conns)
}

// TestHalfOpenConnectionsAreBounded: a client that opens thousands of
// connections and never completes a request must not grow the gateway's
// memory without bound nor keep other clients out. Unbounded, 4,000 such
// connections took the gateway from 12.5 to 58 MB.
func TestHalfOpenConnectionsAreBounded(t *testing.T) {
	h := NewHome(t, nil)
	g := h.Start()
	pid := g.Cmd.Process.Pid
	for i := 0; i < 20; i++ { // warm the paths a request takes
		g.DoRaw("GET", "/health", nil, false)
	}
	time.Sleep(300 * time.Millisecond)
	before := rssKiB(t, pid, "VmRSS")

	const n = 4000
	opened := halfOpen(t, strings.TrimPrefix(g.Base, "http://"), "127.0.0.2", n)
	time.Sleep(1500 * time.Millisecond) // let the gateway accept what it will
	during, peak := rssKiB(t, pid, "VmRSS"), rssKiB(t, pid, "VmHWM")
	t.Logf("RSS before %d KiB, with %d half-open connections %d KiB (peak %d KiB)", before, opened, during, peak)

	// Another client is still served promptly.
	start := time.Now()
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(g.Base + "/health")
	if err != nil {
		t.Fatalf("GET /health during the attack: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("GET /health during the attack: %d", resp.StatusCode)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("GET /health during the attack took %v", took)
	}
	if grew := during - before; grew > 12<<10 {
		t.Errorf("RSS grew by %d KiB under %d half-open connections; want at most 12 MiB", grew, opened)
	}
	if !strings.Contains(g.Stderr(), "127.0.0.2") {
		t.Errorf("the refused connections were not logged with the client's address:\n%s", g.Stderr())
	}
}

// A gateway for the LAN with a short token does not start: exit 1 with one
// line that names the key and how to make a good token, never the token.
func TestShortTokenBeyondLoopbackRefused(t *testing.T) {
	h := NewHome(t, func(c map[string]any) {
		c["gateway"] = map[string]any{"host": "0.0.0.0", "port": 0, "api_token": "hunter2"}
	})
	_, stderr, code := h.Run("gateway")
	if code != 1 {
		t.Fatalf("exit %d, want 1; stderr:\n%s", code, stderr)
	}
	for _, w := range []string{"gateway.api_token", "perch onboard --force", "openssl rand -hex 24"} {
		if !strings.Contains(stderr, w) {
			t.Errorf("stderr does not mention %q:\n%s", w, stderr)
		}
	}
	if strings.Contains(stderr, "hunter2") {
		t.Error("the token reached stderr")
	}
}
