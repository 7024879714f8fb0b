package main

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestHomeCreatedPrivate: whichever command makes PERCH_HOME first makes
// it 0700, since it will hold the config, the token and the database. A
// command that only reads (db check, cron list) makes nothing.
func TestHomeCreatedPrivate(t *testing.T) {
	for _, args := range [][]string{
		{"onboard"},
		{"cron", "add", "--message", "tea", "--every", "1h"},
		{"agent", "-m", "/help"},
	} {
		t.Run(args[0], func(t *testing.T) {
			h := &Home{t: t, Dir: filepath.Join(t.TempDir(), "fresh", "home")}
			_, stderr, _ := h.Run(args...)
			fi, err := os.Stat(h.Dir)
			if err != nil {
				t.Fatalf("perch %v made no home: %v\n%s", args, err, stderr)
			}
			if got := fi.Mode().Perm(); got != 0o700 {
				t.Errorf("perch %v made PERCH_HOME %v, want 0700", args, got)
			}
		})
	}
	h := &Home{t: t, Dir: filepath.Join(t.TempDir(), "fresh")}
	_, stderr, code := h.Run("db", "check")
	if code != 1 || !strings.Contains(stderr, "no database at "+filepath.Join(h.Dir, "perch.db")+" yet") {
		t.Errorf("db check without a database: exit %d, %q", code, stderr)
	}
	_, stderr, code = h.Run("db", "salvage")
	if code != 1 || !strings.Contains(stderr, "no database at "+filepath.Join(h.Dir, "perch.db")+" and no damaged copy") {
		t.Errorf("db salvage without a database: exit %d, %q", code, stderr)
	}
	// Listing what was never stored answers "nothing".
	if out, stderr, code := h.Run("cron", "list", "--json"); code != 0 || strings.TrimSpace(out) != "[]" {
		t.Errorf("cron list without a database: exit %d, %q %q", code, out, stderr)
	}
	if out, _, code := h.Run("channels", "pending"); code != 0 || !strings.Contains(out, "No pairing codes") {
		t.Errorf("channels pending without a database: exit %d, %q", code, out)
	}
	if _, stderr, code := h.Run("cron", "remove", "0123abcd"); code != 1 || !strings.Contains(stderr, `no such job "0123abcd"`) {
		t.Errorf("cron remove without a database: exit %d, %q", code, stderr)
	}
	if _, err := os.Stat(h.Dir); err == nil {
		t.Errorf("db check, db salvage, cron list or channels pending made %s", h.Dir)
	}
}

// TestDamagedDatabaseByHand follows what `perch db` tells a person whose
// database was damaged while the gateway was stopped: check finds it,
// salvage copies out what is readable, check --from vouches for the copy,
// and the gateway started on the copy has the surviving conversations and
// the cron job.
func TestDamagedDatabaseByHand(t *testing.T) {
	h := NewHome(t, nil)
	g := h.Start()
	const n = 40
	pad := strings.Repeat("x", 300)
	for i := range n {
		g.MustChat(fmt.Sprintf("e2e:s%02d", i), fmt.Sprintf("marker-%02d %s", i, pad))
	}
	if status, body := g.Do("POST", "/admin/cron", map[string]any{"message": "water the basil", "schedule": map[string]any{"cron_expr": "0 9 * * *"}}); status != 200 && status != 201 {
		t.Fatalf("add a cron job: %d %v", status, body)
	}
	g.Signal(syscall.SIGTERM)
	if code := g.Wait(15 * time.Second); code != 0 {
		t.Fatalf("exit %d", code)
	}
	db := filepath.Join(h.Dir, "perch.db")
	if out, stderr, code := h.Run("db", "check"); code != 0 || !strings.Contains(out, "no problems found") || !strings.Contains(out, fmt.Sprintf("%d sessions", n)) {
		t.Fatalf("check of a sound file: exit %d\n%s%s", code, out, stderr)
	}

	// Random bytes over the page that holds one conversation's message.
	data, err := os.ReadFile(db)
	if err != nil {
		t.Fatal(err)
	}
	off := bytes.Index(data, []byte("marker-17"))
	if off < 0 {
		t.Fatal("the message is not in the file")
	}
	page := off / 4096 * 4096
	noise := rand.New(rand.NewPCG(1, 2))
	for i := page; i < page+4096; i++ {
		data[i] = byte(noise.Uint32())
	}
	if err := os.WriteFile(db, data, 0o600); err != nil {
		t.Fatal(err)
	}
	out, stderr, code := h.Run("db", "check")
	if code != 1 || !regexp.MustCompile(`[0-9]+ problems?:`).MatchString(out) || !strings.Contains(stderr, "is damaged; 'perch db salvage --from "+db+"'") {
		t.Fatalf("check of a damaged file: exit %d\n%s%s", code, out, stderr)
	}

	out, stderr, code = h.Run("db", "salvage")
	m := regexp.MustCompile(`(?m)^Read (\S+), wrote (\S+): `).FindStringSubmatch(out)
	if code != 0 || m == nil || m[1] != db {
		t.Fatalf("salvage: exit %d\n%s%s", code, out, stderr)
	}
	salvaged := m[2]
	if !strings.Contains(out, "To use it: stop the gateway, move "+db+" away, move "+salvaged+" to "+db) {
		t.Errorf("salvage does not say how to use the copy:\n%s", out)
	}
	out, stderr, code = h.Run("db", "check", "--from", salvaged)
	if code != 0 || !strings.Contains(out, "no problems found") || !strings.Contains(out, "1 cron job,") {
		t.Fatalf("check --from the salvaged copy: exit %d\n%s%s", code, out, stderr)
	}
	if _, stderr, code := h.Run("db", "check", "--from", salvaged+".nope"); code != 1 || !strings.Contains(stderr, "--from "+salvaged+".nope: no such file") {
		t.Errorf("check --from a missing file: exit %d %q", code, stderr)
	}

	// As salvage said: move the damaged file away and the copy in.
	if err := os.Rename(db, db+".bad"); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(salvaged, db); err != nil {
		t.Fatal(err)
	}
	g = h.Start()
	defer g.Signal(syscall.SIGTERM)
	if strings.Contains(g.Stderr(), "damaged") {
		t.Errorf("the gateway found the salvaged file damaged:\n%s", g.Stderr())
	}
	survived := 0
	for i := range n {
		g.MustChat(fmt.Sprintf("e2e:s%02d", i), "again")
		reqs := h.Fake.Requests()
		for _, msg := range reqs[len(reqs)-1].Body.Messages {
			if strings.HasPrefix(msg.Content, fmt.Sprintf("marker-%02d ", i)) {
				survived++
				break
			}
		}
	}
	t.Logf("%d of %d survived", survived, n)
	if survived < n-5 || survived == n {
		t.Errorf("%d of %d conversations came back; want all but those on the damaged page", survived, n)
	}
	if out, _, _ := h.Run("cron", "list"); !strings.Contains(out, "water the basil") {
		t.Errorf("the cron job did not come back:\n%s", out)
	}
}

// TestRootActsAsTheHomesOwner: root running a command on a home that
// belongs to another user (the perch user of a package install) acts as
// that user, so the database it creates there is the service's to open.
// Root-owned files there made the service fail at every start.
func TestRootActsAsTheHomesOwner(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("changing user needs root")
	}
	base := t.TempDir()
	for d := base; d != os.TempDir() && d != "/"; d = filepath.Dir(d) {
		os.Chmod(d, 0o755) // the owner must reach its home
	}
	h := &Home{t: t, Dir: filepath.Join(base, "perch")}
	if err := os.Mkdir(h.Dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(h.Dir, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	if _, stderr, code := h.Run("cron", "add", "--message", "water the tomatoes", "--every", "1h"); code != 0 {
		t.Fatalf("cron add as root: exit %d\n%s", code, stderr)
	}
	if out, stderr, code := h.Run("cron", "list"); code != 0 || !strings.Contains(out, "water the tomatoes") {
		t.Fatalf("cron list as root: exit %d\n%s%s", code, out, stderr)
	}
	entries, _ := os.ReadDir(h.Dir)
	if len(entries) == 0 {
		t.Fatal("the commands made nothing in the home")
	}
	for _, e := range entries {
		fi, err := os.Stat(filepath.Join(h.Dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if st := fi.Sys().(*syscall.Stat_t); st.Uid != 65534 {
			t.Errorf("%s belongs to uid %d; want the home's owner, 65534", e.Name(), st.Uid)
		}
	}
}

// The db command's smaller answers: an empty perch.db is said to be empty
// (the gateway starts a new database in it, it sets nothing aside), a
// salvage that fails writes no file, a wrong word is named, and --json
// lists problems as a list even when there are none.
func TestDBCommandEdges(t *testing.T) {
	h := NewHome(t, nil)
	db := filepath.Join(h.Dir, "perch.db")
	if err := os.WriteFile(db, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	out, stderr, code := h.Run("db", "check")
	if code != 1 || !strings.Contains(out, "1 problem:") || !strings.Contains(out, "starts a new, empty database") ||
		strings.Contains(out, "sets a damaged file aside") || !strings.Contains(stderr, "is empty; there is nothing in it to salvage") {
		t.Errorf("db check of an empty file: exit %d\n%s%s", code, out, stderr)
	}
	_, stderr, code = h.Run("db", "salvage")
	left, _ := filepath.Glob(filepath.Join(h.Dir, "perch.db.salvaged-*"))
	if code != 1 || len(left) != 0 {
		t.Errorf("db salvage of an empty file: exit %d, left %v: %s", code, left, stderr)
	}
	os.Remove(db)
	g := h.Start()
	g.MustChat("s", "hello")
	g.Signal(syscall.SIGTERM)
	g.Wait(30 * time.Second)
	out, stderr, code = h.Run("db", "check", "--json")
	if code != 0 || !strings.Contains(out, `"problems": []`) {
		t.Errorf("db check --json of a sound file: exit %d\n%s%s", code, out, stderr)
	}
	// A config that does not load (a bad key) does not stop the tools
	// that rescue the database: its place is the home's.
	if err := os.WriteFile(filepath.Join(h.Dir, "config.json"), []byte(`{"providers":{"openai":{"api_base":"not a url"}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, stderr, code := h.Run("cron", "list"); code != 1 || !strings.Contains(stderr, "providers.openai.api_base") {
		t.Fatalf("the bad config loads: exit %d, %q", code, stderr)
	}
	if out, stderr, code := h.Run("db", "check", "--json"); code != 0 || !strings.Contains(out, `"problems": []`) {
		t.Errorf("db check with a config that does not load: exit %d\n%s%s", code, out, stderr)
	}
	if out, stderr, code := h.Run("db", "salvage"); code != 0 || !strings.Contains(out, "wrote "+filepath.Join(h.Dir, "perch.db.salvaged-")) {
		t.Errorf("db salvage with a config that does not load: exit %d\n%s%s", code, out, stderr)
	}
	for args, want := range map[string]string{
		"db bogus":       `unknown subcommand "bogus": say check or salvage`,
		"db check extra": `unexpected argument "extra" after check`,
		"db":             "say what to do: check or salvage",
	} {
		if _, stderr, code := h.Run(strings.Fields(args)...); code != 1 || !strings.Contains(stderr, want) {
			t.Errorf("perch %s: exit %d, %q; want %q", args, code, stderr, want)
		}
	}
}
