// Command load measures a perch binary beside two floor programs
// (bench/floor) in one run, on one instant local fake provider: stripped
// size, exec-to-ready, idle RSS (after start, warm, trimmed), /chat latency
// and throughput at concurrency 1 and 16 (one session per worker), peak RSS
// under that load and the first turn after the idle trim; then perch's
// figures as ratios to the floors. Ratios, because absolute figures drift
// with the machine.
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
	"text/tabwriter"
	"time"

	"golang.org/x/sys/unix"
)

func main() {
	bin := flag.String("bin", "bin/perch", "perch binary")
	floor := flag.String("floor", "", "the floor program (bench/floor); empty: built from source with go build")
	n1 := flag.Int("n1", 2000, "requests at concurrency 1")
	n16 := flag.Int("n16", 20000, "requests at concurrency 16")
	settle := flag.Duration("settle", 2*time.Second, "wait after ready before reading the idle RSS")
	idle := flag.Duration("idle", 35*time.Second, "wait after the load before reading the RSS again (the gateway trims after 15-30 s idle)")
	starts := flag.Int("starts", 11, "restarts of perch and the floor, alternating, whose median start is compared")
	only := flag.String("only", "", `run one measure alone: "start" (a fresh start, the load's turns so the database has its size, then the alternating restarts) or "channels" (the gateway with every chat channel and MQTT)`)
	flag.DurationVar(&longIdle, "longidle", 150*time.Second, "how long the every-channel measure goes on reading the RSS after its trimmed reading (it reports the mean and the largest)")
	flag.StringVar(&diagDir, "diag", "", "directory to write, at each warm reading, the gateway's smaps, status and resident pages of its binary (for attribution)")
	flag.BoolVar(&keepHome, "keephome", false, "keep the gateway's home (its database after the load's turns) and print its path, for timing starts by hand")
	flag.IntVar(&rounds16, "rounds16", 3, "alternating c=16 rounds of the stateless floor and perch whose median ratio is compared")
	tput := flag.Int("throughput", 0, "measure only c=16 throughput and CPU per turn of the floor and perch, this many rounds")
	flag.StringVar(&against, "against", "", "with -only start: alternate the restarts with this other perch build (on the same home) instead of the floor, and compare their starts and CPU")
	flag.Parse()
	var err error
	switch {
	case *tput > 0:
		err = throughput(os.Stdout, *bin, *floor, *n16, *tput)
	case *only == "":
		err = run(os.Stdout, *bin, *floor, *n1, *n16, *settle, *idle, *starts)
	case *only == "start":
		err = runStarts(os.Stdout, *bin, *floor, *n1, *n16, *starts)
	case *only == "channels":
		err = runChannels(os.Stdout, *bin, *settle, *idle)
	default:
		fmt.Fprintf(os.Stderr, "load: -only %q: the measures that run alone are \"start\" and \"channels\"\n", *only)
		os.Exit(2)
	}
	if err != nil {
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

// server is one program under measure, running.
type server struct {
	cmd   *exec.Cmd
	url   string
	token string
	start time.Duration // exec to the first 200 from /ready
	once  sync.Once
	// log is -diag's copy of the program's stderr, closed once the
	// program has been waited for (Wait ends the copying into it).
	log *os.File
}

func (s *server) stop() { s.signal(syscall.SIGTERM) }

// signal ends the program with sig (once) and waits for it.
func (s *server) signal(sig os.Signal) {
	s.once.Do(func() {
		s.cmd.Process.Signal(sig)
		s.cmd.Wait()
		if s.log != nil {
			s.log.Close()
		}
	})
}

func (s *server) rssKB(field string) int { return procKB(s.cmd.Process.Pid, field) }

// launch starts argv with env and waits for /ready to answer 200.
func launch(client *http.Client, argv, env []string, url, token string) (*server, error) {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), env...)
	var errOut tailBuffer
	cmd.Stdout, cmd.Stderr = io.Discard, &errOut
	var logf *os.File
	if diagDir != "" {
		// The gateway's log, and the goroutine dump diagQuit asks for.
		if err := os.MkdirAll(diagDir, 0o755); err != nil {
			return nil, err
		}
		var err error
		logf, err = os.Create(filepath.Join(diagDir, filepath.Base(argv[0])+"-"+strconv.Itoa(int(time.Now().UnixMilli()))+".log"))
		if err != nil {
			return nil, err
		}
		cmd.Stderr = io.MultiWriter(&errOut, logf)
	}
	t0 := time.Now()
	if err := cmd.Start(); err != nil {
		if logf != nil {
			logf.Close()
		}
		return nil, err
	}
	s := &server{cmd: cmd, url: url, token: token, log: logf}
	for {
		resp, err := client.Get(url + "/ready")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				s.start = time.Since(t0)
				return s, nil
			}
		}
		if time.Since(t0) > 10*time.Second {
			why := fmt.Sprint(err)
			if req, rerr := http.NewRequest("GET", url+"/ready", nil); rerr == nil {
				req.Header.Set("Authorization", "Bearer "+token)
				if resp, err := client.Do(req); err == nil {
					b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
					resp.Body.Close()
					why = string(b)
				}
			}
			s.stop()
			return nil, fmt.Errorf("%s: not ready after 10s: %s\n%s", argv[0], why, errOut.String())
		}
		// A Go timer sleeps a millisecond or more here (the runtime's
		// poller waits in whole milliseconds), which would round every
		// start up to the next poll; nanosleep keeps the polls 100 µs
		// apart.
		unix.Nanosleep(&unix.Timespec{Nsec: pollEvery.Nanoseconds()}, nil)
	}
}

// pollEvery is how often launch asks /ready while a program starts.
const pollEvery = 100 * time.Microsecond

// figures are one program's measurements.
type figures struct {
	start          time.Duration
	idleKB, peakKB int
	lat1, lat16    []time.Duration
	rps1, rps16    float64
}

// measure starts a program, reads its idle RSS, runs the c=1 and c=16
// loads and reads its peak RSS; it leaves the program running.
func measure(client *http.Client, argv, env []string, url, token string, n1, n16 int, settle time.Duration) (*server, figures, error) {
	var f figures
	s, err := launch(client, argv, env, url, token)
	if err != nil {
		return nil, f, err
	}
	f.start = s.start
	time.Sleep(settle)
	f.idleKB = s.rssKB("VmRSS")
	var d1, d16 time.Duration
	if f.lat1, d1, err = load(client, s, 1, n1); err == nil {
		f.lat16, d16, err = load(client, s, 16, n16)
	}
	if err != nil {
		s.stop()
		return nil, f, err
	}
	f.rps1, f.rps16 = float64(n1)/d1.Seconds(), float64(n16)/d16.Seconds()
	f.peakKB = s.rssKB("VmHWM")
	return s, f, nil
}

// writeBack leaves the binary's pages as they are on a board, where perch
// was installed long before it starts: written to the disk, and read back
// from it by the exec. A binary linked a moment ago still has dirty pages
// in the page cache, which the gateway's trim cannot drop and the kernel
// maps differently: its warm RSS read 4-5 MB lower with every channel (9 MB
// instead of 13.5) until the kernel had written it back, so the figures
// depended on how long ago it was built. Clean, it still sits in the large
// folios it was written in, and a fault maps a whole one: the trim left
// 6.2 MB of a fresh test binary mapped where one read from the disk (in
// 4 KB pages, as on a Raspberry Pi's kernel) kept 1.9 MB. So the pages are
// dropped too, and the first start reads the binary as a board's first
// start after boot does.
func writeBack(bin string) error {
	f, err := os.Open(bin)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		return fmt.Errorf("write back %s: %w", bin, err)
	}
	if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
		return fmt.Errorf("drop %s from the page cache: %w", bin, err)
	}
	return nil
}

// buildFloor compiles bench/floor like perch is compiled (stripped).
func buildFloor(dir string) (string, error) {
	out := filepath.Join(dir, "floor")
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w", "-o", out, "github.com/perchhq/perch/bench/floor")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build the floor: %v\n%s", err, b)
	}
	return out, nil
}

// bench is what every measure starts from: the fake provider, a fresh home,
// the floor (built when not given) and a client; both binaries are written
// back first, so they run from clean page-cache pages as on a board.
type bench struct {
	base, home, floorBin string
	client               *http.Client
}

// keepHome leaves the bench's home in place at the end (-keephome).
var keepHome bool

func setUp(bin, floorBin string) (*bench, func(), error) {
	if err := writeBack(bin); err != nil {
		return nil, nil, err
	}
	base, stopFake := fakeProvider()
	home, err := os.MkdirTemp("", "perch-load-*")
	if err != nil {
		stopFake()
		return nil, nil, err
	}
	done := func() {
		if keepHome {
			fmt.Fprintf(os.Stderr, "load: home kept in %s\n", home)
		} else {
			os.RemoveAll(home)
		}
		stopFake()
	}
	if floorBin == "" {
		if floorBin, err = buildFloor(home); err != nil {
			done()
			return nil, nil, err
		}
	}
	if err := writeBack(floorBin); err != nil {
		done()
		return nil, nil, err
	}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64, MaxIdleConns: 64}}
	return &bench{base: base, home: home, floorBin: floorBin, client: client}, done, nil
}

func run(w io.Writer, bin, floorBin string, n1, n16 int, settle, idleWait time.Duration, starts int) error {
	st, err := os.Stat(bin)
	if err != nil {
		return err
	}
	b, done, err := setUp(bin, floorBin)
	if err != nil {
		return err
	}
	defer done()
	base, home, floorBin, client := b.base, b.home, b.floorBin, b.client

	// The floors first, so perch runs last on a machine in the same state.
	var floors [2]figures
	for i, durable := range []bool{false, true} {
		port := freePort()
		argv := []string{floorBin, "-addr", fmt.Sprintf("127.0.0.1:%d", port), "-provider", base, "-dir", home}
		if durable {
			argv = append(argv, "-durable")
		}
		s, f, err := measure(client, argv, nil, fmt.Sprintf("http://127.0.0.1:%d", port), "", n1, n16, settle)
		if err != nil {
			return err
		}
		s.stop()
		floors[i] = f
	}

	url := writeConfig(home, base)
	s, err := launch(client, []string{bin, "gateway"}, []string{"PERCH_HOME=" + home}, url, "bench-token-0123456789abcdef")
	if err != nil {
		return err
	}
	defer s.stop()
	p := figures{start: s.start}
	time.Sleep(settle)
	p.idleKB = s.rssKB("VmRSS") // trimmed after start
	// Warm: what the board holds between turns before the idle trim.
	if _, _, err := load(client, s, 1, 20); err != nil {
		return err
	}
	time.Sleep(settle)
	warmKB := s.rssKB("VmRSS")
	warmAnonKB, warmFileKB := s.rssKB("RssAnon"), s.rssKB("RssFile")
	diagnose(s, "gateway-warm")
	var d1, d16 time.Duration
	if p.lat1, d1, err = load(client, s, 1, n1); err != nil {
		return err
	}
	if p.lat16, d16, err = load(client, s, 16, n16); err != nil {
		return err
	}
	p.rps1, p.rps16 = float64(n1)/d1.Seconds(), float64(n16)/d16.Seconds()
	// The machine's speed moves by a fifth within seconds, so one pass of
	// each server, a minute apart, compares two hours of the host rather
	// than two programs: c=16 is compared again on alternating rounds
	// with both running, and the median round's ratio counts.
	fport := freePort()
	furl := fmt.Sprintf("http://127.0.0.1:%d", fport)
	fl16, err := launch(client, []string{floorBin, "-addr", fmt.Sprintf("127.0.0.1:%d", fport), "-provider", base, "-dir", home}, nil, furl, "")
	if err != nil {
		return err
	}
	alt, err := alternate16(client, fl16, s, n16, rounds16)
	fl16.stop()
	if err != nil {
		return err
	}
	p.peakKB = s.rssKB("VmHWM")
	// The gateway gives memory back after 15-30 s without a turn; the first
	// turn after that pays for faulting pages back in.
	time.Sleep(idleWait)
	trimmedKB := s.rssKB("VmRSS")
	diagnose(s, "gateway-trimmed")
	first, _, err := load(client, s, 1, 1)
	if err != nil {
		return err
	}
	s.stop()
	chf, err := measureChannels(client, bin, base, settle, idleWait)
	if err != nil {
		return err
	}
	// One start is noise on a busy machine: restart both, alternating, on
	// the files the first runs left (a board restarts far more often than
	// it starts fresh), and compare the medians.
	floorArgv := []string{floorBin, "-addr", fmt.Sprintf("127.0.0.1:%d", freePort()), "-provider", base, "-dir", home}
	pStart, fStart, err := medianStarts(client, starts, []string{bin, "gateway"}, []string{"PERCH_HOME=" + home}, url, "bench-token-0123456789abcdef", floorArgv)
	if err != nil {
		return err
	}

	fl, du := floors[0], floors[1]
	mb := func(kb int) string { return fmt.Sprintf("%.1f MB", float64(kb)/1024) }
	msd := func(d time.Duration) string { return fmt.Sprintf("%.3f ms", ms(d)) }
	fmt.Fprintf(w, "binary (stripped)      %.2f MiB  %s\n", float64(st.Size())/(1<<20), bin)
	fmt.Fprintf(w, "exec to /ready 200     %.1f ms first start (fresh home); median of %d restarts %s, floor %s\n", float64(p.start.Microseconds())/1000, starts, msd(pStart), msd(fStart))
	fmt.Fprintf(w, "idle RSS (after start) %s\n", mb(p.idleKB))
	fmt.Fprintf(w, "idle RSS warm          %s  (after a turn, before the idle trim: %s anonymous, %s pages of the binary and other files)\n", mb(warmKB), mb(warmAnonKB), mb(warmFileKB))
	fmt.Fprintf(w, "/chat c=1              %6.0f req/s  p50 %s  p99 %s  (%d requests)\n", p.rps1, msd(pct(p.lat1, 50)), msd(pct(p.lat1, 99)), n1)
	fmt.Fprintf(w, "/chat c=16             %6.0f req/s  p50 %s  p99 %s  (%d requests)\n", p.rps16, msd(pct(p.lat16, 50)), msd(pct(p.lat16, 99)), n16)
	fmt.Fprintf(w, "c=16 rounds            %s  (perch/floor req/s, alternating, %d requests each)\n", alt, n16)
	fmt.Fprintf(w, "peak RSS               %s\n", mb(p.peakKB))
	fmt.Fprintf(w, "idle RSS %-4s after    %s  (trimmed)\n", idleWait.Round(time.Second), mb(trimmedKB))
	fmt.Fprintf(w, "first turn after trim  %s  (warm p50 %s)\n", msd(first[0]), msd(pct(p.lat1, 50)))
	every := "every chat channel and MQTT"
	if !chf.mqtt {
		every = "every chat channel (no MQTT: " + mosquitto + " is not installed)"
	}
	fmt.Fprintf(w, "idle RSS, %s: %s\n", every, chf)
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "same run, same fake\tperch\tfloor\tdurable floor\tratio\tgoal\t\n")
	ratio := func(r float64, ok bool) string {
		verdict := "met"
		if !ok {
			verdict = "MISSED"
		}
		return fmt.Sprintf("%.2fx (%s)", r, verdict)
	}
	rs := float64(pStart) / float64(fStart)
	fmt.Fprintf(tw, "start (exec to ready, median)\t%s\t%s\t\t%s\t<= 1.3x floor\t\n", msd(pStart), msd(fStart), ratio(rs, rs <= 1.3))
	r1 := float64(pct(p.lat1, 50)) / float64(pct(du.lat1, 50))
	fmt.Fprintf(tw, "c=1 p50\t%s\t%s\t%s\t%s\t<= 0.8x durable\t\n", msd(pct(p.lat1, 50)), msd(pct(fl.lat1, 50)), msd(pct(du.lat1, 50)), ratio(r1, r1 <= 0.8))
	r16 := alt.median()
	fmt.Fprintf(tw, "c=16 req/s (median of %d alternating rounds)\t%.0f\t%.0f\t%.0f\t%s\t>= 0.8x floor\t\n", len(alt), alt.perchMedian(), alt.floorMedian(), du.rps16, ratio(r16, r16 >= 0.8))
	fmt.Fprintf(tw, "idle RSS\t%s warm, %s trimmed\t%s\t%s\t\t\t\n", mb(warmKB), mb(trimmedKB), mb(fl.idleKB), mb(du.idleKB))
	fmt.Fprintf(tw, "idle RSS, all channels\t%s warm, %s trimmed\t\t\t%s\t<= 10 MB warm\t\n", mb(chf.warmKB), mb(chf.trimmedKB), ratio(float64(chf.warmKB)/1024/10, chf.warmKB <= 10*1024 && chf.mqtt))
	fmt.Fprintf(tw, "peak RSS\t%s\t%s\t%s\t\t<= 25 MB\t\n", mb(p.peakKB), mb(fl.peakKB), mb(du.peakKB))
	return tw.Flush()
}

// writeConfig writes perch's config into home (a free loopback port, a
// token, the fake as provider) and returns the gateway's URL.
func writeConfig(home, base string) string {
	port := freePort()
	cfg := map[string]any{
		"gateway":   map[string]any{"host": "127.0.0.1", "port": port, "api_token": "bench-token-0123456789abcdef"},
		"providers": map[string]any{"openrouter": map[string]any{"api_key": "k", "api_base": base}},
		"agents":    map[string]any{"defaults": map[string]any{"model": "openai/gpt-4o-mini"}},
	}
	data, _ := json.Marshal(cfg)
	os.WriteFile(filepath.Join(home, "config.json"), data, 0o600)
	return fmt.Sprintf("http://127.0.0.1:%d", port)
}

// runStarts measures the starts alone, as run does: perch's first start on
// a fresh home, the same turns as run's loads (so the restarts open a
// database of the same size), then the alternating restarts of perch and
// the floor. For work on the start path, where the full run takes minutes.
func runStarts(w io.Writer, bin, floorBin string, n1, n16, starts int) error {
	b, done, err := setUp(bin, floorBin)
	if err != nil {
		return err
	}
	defer done()
	base, home, floorBin, client := b.base, b.home, b.floorBin, b.client
	url := writeConfig(home, base)
	const token = "bench-token-0123456789abcdef"
	s, err := launch(client, []string{bin, "gateway"}, []string{"PERCH_HOME=" + home}, url, token)
	if err != nil {
		return err
	}
	if _, _, err = load(client, s, 1, n1); err == nil {
		_, _, err = load(client, s, 16, n16)
	}
	s.stop()
	if err != nil {
		return err
	}
	if against != "" {
		return startsAgainst(w, client, starts, bin, against, []string{"PERCH_HOME=" + home}, url, token)
	}
	floorArgv := []string{floorBin, "-addr", fmt.Sprintf("127.0.0.1:%d", freePort()), "-provider", base, "-dir", home}
	pStart, fStart, err := medianStarts(client, starts, []string{bin, "gateway"}, []string{"PERCH_HOME=" + home}, url, token, floorArgv)
	if err != nil {
		return err
	}
	rs := float64(pStart) / float64(fStart)
	fmt.Fprintf(w, "exec to /ready 200     %.1f ms first start (fresh home); median of %d restarts %.3f ms, floor %.3f ms: %.2fx (goal <= 1.3x)\n",
		float64(s.start.Microseconds())/1000, starts, ms(pStart), ms(fStart), rs)
	return nil
}

// load sends n /chat requests from c workers, each on its own session.
func load(client *http.Client, s *server, c, n int) ([]time.Duration, time.Duration, error) {
	url := s.url
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
				if s.token != "" {
					req.Header.Set("Authorization", "Bearer "+s.token)
				}
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

// tailBuffer keeps the last 8 KiB written to it: a program's stderr, for
// the error when it does not become ready.
type tailBuffer struct {
	mu  sync.Mutex
	buf []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if n := len(t.buf); n > 8<<10 {
		t.buf = append(t.buf[:0], t.buf[n-8<<10:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.buf)
}

// medianStarts starts perch and the floor n times each, alternating, and
// returns the median exec-to-ready of each.
// against is another perch build whose starts -only start compares with
// bin's, alternating, on the same home: a change's effect on the start is
// a few tenths of a millisecond, below what two separate runs can tell
// apart on a noisy machine.
var against string

// startsAgainst restarts bin and other in turn n times each and prints
// the median exec to /ready 200 of each and the median CPU each process
// used in all (to its first answer, then its stop), which moves less with
// the machine's noise than the wall clock does.
func startsAgainst(w io.Writer, client *http.Client, n int, bin, other string, env []string, url, token string) error {
	// Both as a board has them: bin ran the load's turns a moment ago.
	for _, b := range []string{bin, other} {
		if err := writeBack(b); err != nil {
			return err
		}
	}
	var walls, cpus [2][]time.Duration
	for i := range max(n, 1) {
		for j, b := range [2]string{bin, other} {
			if i%2 == 1 {
				j, b = 1-j, [2]string{bin, other}[1-j]
			}
			s, err := launch(client, []string{b, "gateway"}, env, url, token)
			if err != nil {
				return err
			}
			s.stop()
			walls[j] = append(walls[j], s.start)
			cpus[j] = append(cpus[j], s.cmd.ProcessState.UserTime()+s.cmd.ProcessState.SystemTime())
		}
	}
	for j, b := range [2]string{bin, other} {
		fmt.Fprintf(w, "%-24s exec to /ready 200 median %.3f ms (p25 %.3f, p75 %.3f), CPU median %.3f ms\n",
			b, ms(pct(walls[j], 50)), ms(pct(walls[j], 25)), ms(pct(walls[j], 75)), ms(pct(cpus[j], 50)))
	}
	fmt.Fprintf(w, "ratio %s / %s: wall %.3f, CPU %.3f over %d restarts each\n", bin, other,
		float64(pct(walls[0], 50))/float64(pct(walls[1], 50)), float64(pct(cpus[0], 50))/float64(pct(cpus[1], 50)), n)
	return nil
}

func medianStarts(client *http.Client, n int, perch, env []string, url, token string, floorArgv []string) (time.Duration, time.Duration, error) {
	floorURL := "http://" + floorArgv[2]
	var ps, fs []time.Duration
	for range max(n, 1) {
		s, err := launch(client, floorArgv, nil, floorURL, "")
		if err != nil {
			return 0, 0, err
		}
		s.stop()
		fs = append(fs, s.start)
		s, err = launch(client, perch, env, url, token)
		if err != nil {
			return 0, 0, err
		}
		s.stop()
		ps = append(ps, s.start)
	}
	return pct(ps, 50), pct(fs, 50), nil
}
