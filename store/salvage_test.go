package store_test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/perchhq/perch/appliance/chat"
	"github.com/perchhq/perch/store"
	"github.com/perchhq/perch/store/storetest"
)

// TestCheckFileSoundAndDamaged: `perch db check` counts what a sound file
// holds, lists what is wrong with a damaged one, and changes neither.
func TestCheckFileSoundAndDamaged(t *testing.T) {
	path := filepath.Join(t.TempDir(), "perch.db")
	populate(t, path, 30)
	rep, err := store.CheckFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK() || rep.Sessions != 30 || rep.Messages != 180 || rep.CronJobs != 2 || rep.Devices != 1 || rep.Schema != store.SchemaVersion {
		t.Fatalf("sound file report:\n%s\n%+v", rep, rep)
	}
	if !strings.Contains(rep.String(), "no problems found") {
		t.Errorf("report text:\n%s", rep)
	}
	smash(t, path, 4, 3)
	before, _ := os.ReadFile(path)
	rep, err = store.CheckFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if rep.OK() || len(rep.Problems) == 0 || !strings.Contains(rep.GatewayAdvice(), "perch db salvage") {
		t.Fatalf("damaged file report:\n%s", rep)
	}
	after, _ := os.ReadFile(path)
	if !bytes.Equal(before, after) || len(store.DamagedCopies(path)) != 0 {
		t.Fatal("check changed the file")
	}
}

// TestCheckFileReadsPastATornMetaPage: a meta page an interrupted commit
// left torn is no damage (bbolt reads the other one, and so does the
// gateway, which starts on the file as it is): the check says so in a
// note and finds no problem. It used to run bbolt's own check, which
// stopped at the torn page with a raw assertion ("panic: assertion
// failed: Page expected to be: 1 …"), and call the file damaged.
func TestCheckFileReadsPastATornMetaPage(t *testing.T) {
	path := filepath.Join(t.TempDir(), "perch.db")
	populate(t, path, 3)
	smash(t, path, 1, 7)
	rep, err := store.CheckFile(path)
	if err != nil {
		t.Fatal(err)
	}
	txt := rep.String()
	if !rep.OK() || rep.Sessions != 3 || len(rep.Notes) == 0 || !strings.Contains(txt, "note: meta page 1") || strings.Contains(txt, "panic") {
		t.Fatalf("a torn meta page:\n%s\n%+v", txt, rep)
	}
	if !strings.Contains(txt, "3 sessions, ") || !strings.Contains(txt, " 1 device record, ") {
		t.Errorf("counts are not in words:\n%s", txt)
	}
}

// TestCheckFileRefusesWhileOpen: the check takes the lock, so it never
// reads a file a gateway is writing.
func TestCheckFileRefusesWhileOpen(t *testing.T) {
	t.Parallel()
	db := storetest.Open(t)
	start := time.Now()
	if _, err := store.CheckFile(db.Path()); !errors.Is(err, store.ErrLocked) {
		t.Fatalf("err = %v", err)
	}
	if time.Since(start) > 3*time.Second {
		t.Fatal("waited too long")
	}
	if _, err := store.CheckFile(filepath.Join(t.TempDir(), "absent.db")); err == nil {
		t.Fatal("an absent file checked fine")
	}
}

// TestSalvageCopiesWhatIsReadable: damage in one part of the file costs
// only the records on it; every other session, job and device record is
// copied, and the result is a sound database.
func TestSalvageCopiesWhatIsReadable(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	src := filepath.Join(dir, "perch.db")
	populate(t, src, 80)
	// Damage a page holding one session's messages (a page high in the
	// tree, the sessions bucket's own, would cost every session under it
	// unless the previous transaction's tree has it).
	pg := messagePage(t, src)
	smash(t, src, int64(pg), 11)
	dst := filepath.Join(dir, "salvaged.db")
	rep, err := store.Salvage(src, dst)
	if err != nil {
		t.Fatal(err)
	}
	t.Log(rep)
	if rep.ProblemCount == 0 {
		t.Fatal("the damage was not noticed")
	}
	if rep.Sessions < 79 || rep.Sessions+rep.SessionsDamaged < 80 || rep.SessionsDamaged == 0 || rep.CronJobs != 2 || rep.DeviceRecords != 1 {
		t.Fatalf("report = %+v", rep)
	}
	if _, err := os.Stat(dst + ".open"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the salvaged file has a marker beside it (%v): it is to be moved into place alone", err)
	}
	storetest.CheckFile(t, dst)
	db, err := store.Open(dst, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ss, _ := db.Sessions()
	if len(ss) != rep.Sessions || db.SessionCount() != rep.Sessions {
		t.Fatalf("%d sessions in the file, %d counted, report says %d", len(ss), db.SessionCount(), rep.Sessions)
	}
	msgs := 0
	for _, s := range ss {
		h, err := db.History(s.Key)
		if err != nil {
			t.Fatal(err)
		}
		if len(h) != s.Count || h[0].Role != "user" || s.Channel != "telegram" {
			t.Errorf("session %s: %d messages, info %+v", s.Key, len(h), s)
		}
		msgs += len(h)
	}
	if msgs != rep.Messages {
		t.Errorf("%d messages, report says %d", msgs, rep.Messages)
	}
	if u, _ := db.TotalUsage(); u.TotalTokens != 80 {
		t.Errorf("total usage = %+v", u)
	}
	// The salvaged file takes new turns.
	if err := db.Append(ss[0].Key, []chat.Message{user("more")}, chat.Usage{}, 200); err != nil {
		t.Fatal(err)
	}
	if _, err := store.Salvage(src, dst); err == nil || !strings.Contains(err.Error(), "exists") {
		t.Fatalf("salvage over an existing file: %v", err)
	}
}

// A salvage that fails leaves no file behind: an empty database checks as
// sound, and moved into place as the help says it would replace the data
// it was meant to save.
func TestFailedSalvageLeavesNothing(t *testing.T) {
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty.db")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	held := filepath.Join(dir, "perch.db")
	populate(t, held, 2)
	open, err := store.Open(held, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer open.Close()
	for name, src := range map[string]string{"no meta page": empty, "open in a gateway": held} {
		dst := filepath.Join(dir, "out-"+strings.ReplaceAll(name, " ", "-")+".db")
		if _, err := store.Salvage(src, dst); err == nil {
			t.Fatalf("%s: salvage succeeded", name)
		}
		left, _ := filepath.Glob(dst + "*")
		if len(left) > 0 {
			t.Errorf("%s: the failed salvage left %v", name, left)
		}
	}
}

// TestSalvageFallsBackToPreviousTransaction: when the newest transaction's
// root page is damaged, the previous transaction's tree (whose pages a
// commit never overwrites) still holds everything but that commit.
func TestSalvageFallsBackToPreviousTransaction(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "perch.db")
	populate(t, src, 20)
	db, _ := store.Open(src, store.Options{})
	db.Put(store.BucketCron, "job3", map[string]string{"id": "job3"})
	db.Close()
	// The newest meta's root page.
	rep, err := store.CheckFile(src)
	if err != nil || !rep.OK() {
		t.Fatal(rep, err)
	}
	root := rootPage(t, src)
	smash(t, src, int64(root), 5)
	srep, err := store.Salvage(src, filepath.Join(dir, "out.db"))
	if err != nil {
		t.Fatal(err)
	}
	if !srep.OlderMeta || srep.Sessions != 20 || srep.CronJobs < 2 {
		t.Fatalf("report = %+v", srep)
	}
}

// rootPage reads the root bucket's page from the newest valid meta.
func rootPage(t *testing.T, path string) uint64 {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	ps := os.Getpagesize()
	best, root := uint64(0), uint64(0)
	for _, off := range []int{16, ps + 16} {
		m := data[off:]
		txid := le64(m[48:])
		if txid >= best {
			best, root = txid, le64(m[16:])
		}
	}
	return root
}

func le64(b []byte) uint64 {
	var n uint64
	for i := 7; i >= 0; i-- {
		n = n<<8 | uint64(b[i])
	}
	return n
}

// TestSalvageKeepsHistoriesWellFormed: messages lost in the middle of a
// session must not leave a tool result without its call (providers refuse
// such a history).
func TestSalvageKeepsHistoriesWellFormed(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "perch.db")
	db, _ := store.Open(src, store.Options{})
	big := strings.Repeat("B", 5000) // a page of its own for the call
	for i := 0; i < 3; i++ {
		db.Append("s", []chat.Message{
			user(fmt.Sprint("q", i)),
			{Role: "assistant", ToolCalls: []chat.ToolCall{{ID: fmt.Sprint("c", i), Name: "exec", Arguments: big}}},
			{Role: "tool", ToolCallID: fmt.Sprint("c", i), Content: "r"},
			assistant(fmt.Sprint("a", i)),
		}, chat.Usage{}, 200)
	}
	db.Close()
	// Break the second call's JSON (it sits on its own overflow pages).
	data, _ := os.ReadFile(src)
	i := bytes.Index(data, []byte(`"c1"`))
	if i < 0 {
		t.Fatal("call not found")
	}
	copy(data[i:], "\xff\xfe")
	os.WriteFile(src, data, 0o600)
	rep, err := store.Salvage(src, filepath.Join(dir, "out.db"))
	if err != nil {
		t.Fatal(err)
	}
	db, _ = store.Open(filepath.Join(dir, "out.db"), store.Options{})
	defer db.Close()
	h, _ := db.History("s")
	for i, m := range h {
		if m.Role == "tool" && (i == 0 || len(h[i-1].ToolCalls) == 0) {
			t.Fatalf("orphan tool result at %d: %s", i, contents(h))
		}
		if len(m.ToolCalls) > 0 && (i+1 == len(h) || h[i+1].Role != "tool") {
			t.Fatalf("call without its result at %d: %s", i, contents(h))
		}
	}
	if len(h) != 10 || rep.MessagesLost != 2 {
		t.Fatalf("kept %d messages (%s), lost %d", len(h), contents(h), rep.MessagesLost)
	}
}

// A salvage's report adds up: unless it says that damaged pages held more
// than it can count, the messages kept and the messages it reports lost
// are every message the file held, whichever page was damaged or however
// much of the file was cut off (a black-box review found "0 lost" where
// three sessions were gone).
func TestSalvageReportCountsWhatWasLost(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	pristine := filepath.Join(dir, "pristine.db")
	const sessions, perSession, long = 16, 6, 120
	populate(t, pristine, sessions)
	// One long session spans several pages: losing its first or last page
	// leaves no hole in the sequence numbers of the rest.
	db, err := store.Open(pristine, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	store.NoSyncForTest(db)
	for i := range long / 2 {
		if err := db.Append("telegram:long", []chat.Message{user(fmt.Sprintf("q%d %s", i, strings.Repeat("y", 300))), assistant("a")}, chat.Usage{}, 1000); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	const total = sessions*perSession + long
	data, err := os.ReadFile(pristine)
	if err != nil {
		t.Fatal(err)
	}
	pages := int64(len(data) / os.Getpagesize())
	type damage struct {
		name string
		do   func(path string)
	}
	var cases []damage
	for pg := int64(2); pg < pages; pg++ {
		cases = append(cases, damage{fmt.Sprintf("page %d smashed", pg), func(path string) { smash(t, path, pg, pg) }})
	}
	for cut := int64(3); cut < pages; cut += 2 {
		cases = append(cases, damage{fmt.Sprintf("cut to %d pages", cut), func(path string) {
			if err := os.Truncate(path, cut*int64(os.Getpagesize())); err != nil {
				t.Fatal(err)
			}
		}})
	}
	uncounted := 0
	for i, c := range cases {
		src := filepath.Join(dir, fmt.Sprintf("src%d.db", i))
		if err := os.WriteFile(src, data, 0o600); err != nil {
			t.Fatal(err)
		}
		c.do(src)
		rep, err := store.Salvage(src, filepath.Join(dir, fmt.Sprintf("out%d.db", i)))
		if err != nil {
			continue // nothing readable: an error, not a report
		}
		if rep.LostUncounted {
			uncounted++
			if !strings.Contains(rep.String(), "at least") {
				t.Errorf("%s: the report's line does not say its count is a lower bound: %s", c.name, rep)
			}
			continue
		}
		if got := rep.Messages + rep.MessagesLost; got != total {
			t.Errorf("%s: %d kept + %d lost = %d messages, the file held %d: %s", c.name, rep.Messages, rep.MessagesLost, got, total, rep)
		}
	}
	t.Logf("%d damaged files, %d with losses that cannot be counted", len(cases), uncounted)
}
