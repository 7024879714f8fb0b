package store_test

import (
	"github.com/perchhq/perch/appliance/chat"

	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/perchhq/perch/store"
	"github.com/perchhq/perch/store/storetest"
)

func user(s string) chat.Message      { return chat.Message{Role: "user", Content: s} }
func assistant(s string) chat.Message { return chat.Message{Role: "assistant", Content: s} }

func contents(msgs []chat.Message) string {
	parts := make([]string, len(msgs))
	for i, m := range msgs {
		parts[i] = m.Role[:1] + ":" + m.Content
	}
	return strings.Join(parts, " ")
}

func TestHistorySurvivesReopen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "perch.db")
	db, err := store.Open(path, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Append("rest:default", []chat.Message{user("hi")}, chat.Usage{}, 200); err != nil {
		t.Fatal(err)
	}
	call := chat.Message{Role: "assistant", ToolCalls: []chat.ToolCall{{ID: "c1", Name: "read_file", Arguments: `{"path":"a"}`}}}
	res := chat.Message{Role: "tool", ToolCallID: "c1", Content: "data"}
	if err := db.Append("rest:default", []chat.Message{call, res, assistant("done")}, chat.Usage{PromptTokens: 10, CompletionTokens: 5, TotalTokens: 15}, 200); err != nil {
		t.Fatal(err)
	}
	db.Close()
	db, err = store.Open(path, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	h, err := db.History("rest:default")
	if err != nil {
		t.Fatal(err)
	}
	if len(h) != 4 || h[1].ToolCalls[0].Arguments != `{"path":"a"}` || h[2].ToolCallID != "c1" {
		t.Fatalf("history = %+v", h)
	}
	info, _ := db.Session("rest:default")
	if info.Count != 4 || info.Usage.TotalTokens != 15 {
		t.Errorf("info = %+v", info)
	}
	total, _ := db.TotalUsage()
	if total.TotalTokens != 15 {
		t.Errorf("total usage = %+v", total)
	}
}

// TestTrimKeepsLimitAndStartsWithUser: trimming never leaves an orphan tool
// result (or assistant reply) at the front, which providers reject.
func TestTrimKeepsLimitAndStartsWithUser(t *testing.T) {
	db := storetest.Open(t)
	for i := 0; i < 80; i++ {
		turn := []chat.Message{
			user(fmt.Sprint(i)),
			{Role: "assistant", ToolCalls: []chat.ToolCall{{ID: "x", Name: "t"}}},
			{Role: "tool", ToolCallID: "x", Content: "r"},
			assistant(fmt.Sprint(i)),
		}
		if err := db.Append("s", turn, chat.Usage{}, 100); err != nil {
			t.Fatal(err)
		}
	}
	h, _ := db.History("s")
	if len(h) > 100 || len(h) < 97 {
		t.Fatalf("kept %d messages, want about 100", len(h))
	}
	if h[0].Role != "user" {
		t.Fatalf("history starts with %q", h[0].Role)
	}
	if last := h[len(h)-1]; last.Content != "79" {
		t.Fatalf("last message %+v", last)
	}
	// The cached view and the file agree.
	fresh, err := store.Open(filepath.Join(t.TempDir(), "x.db"), store.Options{CacheSessions: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer fresh.Close()
	info, _ := db.Session("s")
	if info.Count != len(h) {
		t.Errorf("info count %d, history %d", info.Count, len(h))
	}
}

func TestCacheMatchesDisk(t *testing.T) {
	path := filepath.Join(t.TempDir(), "perch.db")
	db, _ := store.Open(path, store.Options{})
	for i := 0; i < 130; i++ {
		db.History("s") // keep the session cached while appending
		if err := db.Append("s", []chat.Message{user(fmt.Sprint(i)), assistant(fmt.Sprint(i))}, chat.Usage{}, 100); err != nil {
			t.Fatal(err)
		}
	}
	cached, _ := db.History("s")
	db.Close()
	db2, _ := store.Open(path, store.Options{CacheSessions: -1})
	defer db2.Close()
	disk, _ := db2.History("s")
	if contents(cached) != contents(disk) {
		t.Fatalf("cache and disk differ:\ncache %s\ndisk  %s", contents(cached), contents(disk))
	}
}

// TestReaderSliceIsStable: a slice handed out earlier never changes under
// later appends.
func TestReaderSliceIsStable(t *testing.T) {
	db := storetest.Open(t)
	db.Append("s", []chat.Message{user("a")}, chat.Usage{}, 100)
	h1, _ := db.History("s")
	before := contents(h1)
	_ = append(h1, user("mutation by caller"))
	db.Append("s", []chat.Message{user("b")}, chat.Usage{}, 100)
	if contents(h1) != before {
		t.Fatalf("earlier slice changed: %s", contents(h1))
	}
	h2, _ := db.History("s")
	if contents(h2) != "u:a u:b" {
		t.Fatalf("history = %s", contents(h2))
	}
}

func TestConcurrentAppendsAllDurable(t *testing.T) {
	path := filepath.Join(t.TempDir(), "perch.db")
	db, _ := store.Open(path, store.Options{})
	var wg sync.WaitGroup
	for w := 0; w < 50; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := fmt.Sprintf("s%d", w)
			for i := 0; i < 20; i++ {
				if err := db.Append(key, []chat.Message{user(fmt.Sprint(i)), assistant(fmt.Sprint(i))}, chat.Usage{TotalTokens: 1}, 200); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	db.Close()
	storetest.CheckFile(t, path)
	db, _ = store.Open(path, store.Options{})
	defer db.Close()
	sessions, _ := db.Sessions()
	if len(sessions) != 50 {
		t.Fatalf("%d sessions", len(sessions))
	}
	for _, s := range sessions {
		if s.Count != 40 {
			t.Errorf("%s has %d messages", s.Key, s.Count)
		}
	}
	if u, _ := db.TotalUsage(); u.TotalTokens != 1000 {
		t.Errorf("total tokens %d", u.TotalTokens)
	}
}

func TestResetAndRecords(t *testing.T) {
	db := storetest.Open(t)
	db.Append("a", []chat.Message{user("x")}, chat.Usage{}, 100)
	if err := db.Reset("a"); err != nil {
		t.Fatal(err)
	}
	if h, _ := db.History("a"); len(h) != 0 {
		t.Fatalf("history after reset: %v", h)
	}
	type job struct{ ID, Msg string }
	if err := db.Put(store.BucketCron, "j1", job{"j1", "hello"}); err != nil {
		t.Fatal(err)
	}
	db.Put(store.BucketCron, "j2", job{"j2", "bye"})
	var got job
	if err := db.Get(store.BucketCron, "j1", &got); err != nil || got.Msg != "hello" {
		t.Fatalf("get = %+v, %v", got, err)
	}
	if err := db.Get(store.BucketCron, "nope", &got); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("absent get err = %v", err)
	}
	db.Delete(store.BucketCron, "j1")
	var ids []string
	db.List(store.BucketCron, func(k string, _ []byte) error { ids = append(ids, k); return nil })
	if strings.Join(ids, ",") != "j2" {
		t.Fatalf("ids = %v", ids)
	}
}

// TestLockedNamesHolder: a second opener gets a clear error, not a hang.
func TestLockedNamesHolder(t *testing.T) {
	path := filepath.Join(t.TempDir(), "perch.db")
	db, _ := store.Open(path, store.Options{})
	defer db.Close()
	start := time.Now()
	_, err := store.Open(path, store.Options{Timeout: 100 * time.Millisecond, LockHolder: func() string { return "pid 4242" }})
	if !errors.Is(err, store.ErrLocked) || !strings.Contains(err.Error(), "pid 4242") {
		t.Fatalf("err = %v", err)
	}
	if time.Since(start) > 2*time.Second {
		t.Fatal("open waited too long")
	}
}

func TestClosedRefusesWrites(t *testing.T) {
	db, _ := store.Open(filepath.Join(t.TempDir(), "x.db"), store.Options{})
	db.Close()
	if err := db.Append("s", []chat.Message{user("x")}, chat.Usage{}, 100); !errors.Is(err, store.ErrClosed) {
		t.Fatalf("err = %v", err)
	}
	if err := db.Ping(); !errors.Is(err, store.ErrClosed) {
		t.Fatalf("ping err = %v", err)
	}
}

// TestCrashLosesNothingAcknowledged kills a writer process with SIGKILL
// mid-stream and checks that every append it acknowledged is on disk and the
// file is consistent.
func TestCrashLosesNothingAcknowledged(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "perch.db")
	replayed := 0
	for round := 0; round < 3; round++ {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), "STORE_CRASH_CHILD="+path)
		out, _ := cmd.StdoutPipe()
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(out)
		acked := map[string]int{}
		for sc.Scan() {
			key, n, _ := strings.Cut(sc.Text(), " ")
			acked[key], _ = strconv.Atoi(n)
			if len(acked) >= 4 && acked["w0"] > 30*(round+1) {
				break
			}
		}
		cmd.Process.Signal(syscall.SIGKILL)
		cmd.Wait()
		db, err := store.Open(path, store.Options{})
		if err != nil {
			t.Fatal(err)
		}
		for key, n := range acked {
			h, _ := db.History(key)
			found := false
			for i, m := range h {
				if m.Content == strconv.Itoa(n) {
					found = true
				}
				// Each run counts up from 0: anything else is a message
				// applied twice or one lost in the middle.
				if v, _ := strconv.Atoi(m.Content); i > 0 && v != 0 {
					if prev, _ := strconv.Atoi(h[i-1].Content); v != prev+1 {
						t.Errorf("round %d: %s: message %d follows %d", round, key, v, prev)
					}
				}
			}
			if !found {
				t.Errorf("round %d: acknowledged message %s/%d lost", round, key, n)
			}
		}
		replayed += db.Replayed()
		// The journal's records were put into bbolt once, at this open:
		// the session's own count agrees with its messages.
		for key := range acked {
			h, _ := db.History(key)
			info, _ := db.Session(key)
			if info.Count != len(h) {
				t.Errorf("round %d: %s: info counts %d messages, history has %d", round, key, info.Count, len(h))
			}
		}
		db.Close()
		storetest.CheckFile(t, path)
	}
	// The writer appends far faster than the background apply runs, so a
	// kill finds records only in the journal: this test is about them.
	if replayed == 0 {
		t.Error("no round left journal records to replay")
	}
	t.Logf("journal records replayed over 3 rounds: %d", replayed)
}

func TestMain(m *testing.M) {
	if path := os.Getenv("STORE_CRASH_CHILD"); path != "" {
		crashChild(path)
		return
	}
	if path := os.Getenv("STORE_OPEN_CHILD"); path != "" {
		openChildMain(path)
		return
	}
	os.Exit(m.Run())
}

// crashChild appends forever from four writers, printing each acknowledged
// message; the parent kills it.
func crashChild(path string) {
	db, err := store.Open(path, store.Options{Timeout: 5 * time.Second})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	var mu sync.Mutex
	for w := 0; w < 4; w++ {
		go func() {
			key := fmt.Sprintf("w%d", w)
			// Reading the history first is what a turn does, and it puts
			// the session in the cache, so the appends go through the
			// journal.
			if _, err := db.History(key); err != nil {
				os.Exit(3)
			}
			for i := 0; ; i++ {
				if err := db.Append(key, []chat.Message{user(strconv.Itoa(i))}, chat.Usage{}, 100000); err != nil {
					os.Exit(3)
				}
				mu.Lock()
				fmt.Printf("%s %d\n", key, i)
				mu.Unlock()
			}
		}()
	}
	select {}
}

func BenchmarkAppendSerial(b *testing.B) {
	db := storetest.Open(b)
	msgs := []chat.Message{user("hello there"), assistant("general kenobi")}
	db.History("bench") // as a turn does: the session is cached
	b.ResetTimer()
	for b.Loop() {
		if err := db.Append("bench", msgs, chat.Usage{TotalTokens: 3}, 200); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkAppendParallel16(b *testing.B) {
	db := storetest.Open(b)
	msgs := []chat.Message{user("hello there"), assistant("general kenobi")}
	var n int64
	var mu sync.Mutex
	b.SetParallelism(8) // 2 cores x 8 = 16 writers
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		mu.Lock()
		n++
		key := fmt.Sprintf("bench%d", n)
		mu.Unlock()
		db.History(key)
		for pb.Next() {
			if err := db.Append(key, msgs, chat.Usage{TotalTokens: 3}, 200); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// TestNewerSchemaRefused: a file from a newer perch is not touched.
func TestNewerSchemaRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "perch.db")
	db, _ := store.Open(path, store.Options{})
	db.Close()
	b, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	b.Update(func(tx *bolt.Tx) error {
		v := make([]byte, 8)
		binary.BigEndian.PutUint64(v, 99)
		return tx.Bucket([]byte("meta")).Put([]byte("schema"), v)
	})
	b.Close()
	_, err = store.Open(path, store.Options{})
	if !errors.Is(err, store.ErrNewerSchema) || !strings.Contains(err.Error(), "upgrade perch") {
		t.Fatalf("err = %v", err)
	}
}

func TestDeviceStateRoundTrip(t *testing.T) {
	db := storetest.Open(t)
	if got, err := db.LoadDevices(); got != nil || err != nil {
		t.Fatalf("fresh store: %q %v", got, err)
	}
	db.SaveDevices([]byte(`{"v":1}`))
	if got, _ := db.LoadDevices(); string(got) != `{"v":1}` {
		t.Fatalf("got %q", got)
	}
}

// TestHistoryAfterDroppingTheCache: the histories read after the cache was
// dropped are the ones before it, and later appends land on them.
func TestHistoryAfterDroppingTheCache(t *testing.T) {
	db, err := store.Open(filepath.Join(t.TempDir(), "perch.db"), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for i := range 3 {
		key := fmt.Sprint("s", i)
		if err := db.Append(key, []chat.Message{user("hi " + key), assistant("hello")}, chat.Usage{}, 200); err != nil {
			t.Fatal(err)
		}
		if _, err := db.History(key); err != nil { // cached
			t.Fatal(err)
		}
	}
	if n := db.DropCachedHistories(); n == 0 {
		t.Fatal("nothing was cached to drop: the check below would prove nothing")
	}
	if err := db.Append("s1", []chat.Message{user("again"), assistant("yes")}, chat.Usage{}, 200); err != nil {
		t.Fatal(err)
	}
	for key, want := range map[string]string{"s0": "u:hi s0 a:hello", "s1": "u:hi s1 a:hello u:again a:yes", "s2": "u:hi s2 a:hello"} {
		h, err := db.History(key)
		if err != nil {
			t.Fatal(err)
		}
		if got := contents(h); got != want {
			t.Errorf("%s after the drop: %q, want %q", key, got, want)
		}
	}
}
