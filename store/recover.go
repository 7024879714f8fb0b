package store

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	bolt "go.etcd.io/bbolt"
)

// Recovered describes a damaged database that Open set aside.
type Recovered struct {
	// At is when it was set aside (UTC).
	At time.Time `json:"at"`
	// DamagedPath is the damaged file, kept beside the database under a
	// name that still starts with the database's (perch.db.damaged-…).
	DamagedPath string `json:"damaged_path"`
	// Reason is the first problem found; Problems lists up to 50 and
	// ProblemCount counts them all. They may name session keys.
	Reason       string   `json:"reason"`
	Problems     []string `json:"problems,omitempty"`
	ProblemCount int      `json:"problem_count"`
	// UncleanShutdown is true when the previous writer did not close the
	// file (a crash or a power cut), which made Open check every record.
	UncleanShutdown bool `json:"unclean_shutdown"`
	// Salvaged is what was copied from the damaged file into the fresh one.
	Salvaged SalvageReport `json:"salvaged"`
}

// Message is one line for the log, a readiness check and the page: what
// happened and what was kept, with no path, session key or other detail
// that a stranger should not read.
func (r *Recovered) Message() string {
	s := r.Salvaged
	msg := fmt.Sprintf("the database was found damaged at start on %s and set aside; "+
		"a fresh one holds what could be read from it: %d sessions, %d messages, %d cron jobs",
		r.At.UTC().Format("2006-01-02 15:04 UTC"), s.Sessions, s.Messages, s.CronJobs)
	if s.Error != "" {
		msg += " (the copy stopped early)"
	}
	return msg
}

// Detail adds where the damaged copy is and why it was set aside, for the
// log and authenticated views.
func (r *Recovered) Detail() string {
	return fmt.Sprintf("%s; damaged copy kept at %s (delete it once you no longer need it); first problem: %s",
		r.Message(), r.DamagedPath, r.Reason)
}

var keyRecovered = []byte("recovered")

// Recovered returns the last recovery for as long as its damaged copy is
// still beside the database (deleting the copy dismisses it), or nil. It
// survives restarts: the note is kept in the meta bucket.
func (db *DB) Recovered() *Recovered {
	r := db.recovered
	if r == nil {
		return nil
	}
	if _, err := os.Stat(r.DamagedPath); err != nil {
		return nil
	}
	c := *r
	return &c
}

func loadRecovered(b *bolt.DB) (*Recovered, error) {
	var r *Recovered
	err := b.View(func(tx *bolt.Tx) error {
		v := tx.Bucket([]byte(BucketMeta)).Get(keyRecovered)
		if v == nil {
			return nil
		}
		r = &Recovered{}
		return json.Unmarshal(v, r)
	})
	return r, err
}

// maxDamagedCopies bounds the damaged copies kept beside the database: a
// card that keeps failing must not fill the disk with them.
const maxDamagedCopies = 3

// setAside renames the damaged file (still locked through f) and returns a
// locked fresh file in its place.
func setAside(path string, f *os.File, chk *fileCheck, unclean bool, opts Options) (*os.File, *Recovered, error) {
	defer f.Close()
	now := time.Now().UTC()
	// Within one second, later copies get -2, -3, …: above every copy of
	// that second, so the newest always sorts last.
	base := path + ".damaged-" + now.Format("20060102T150405Z")
	dst, n := base, 1
	for _, c := range DamagedCopies(path) {
		if ts, seq := copyOrder(c); ts == base[len(path)+len(".damaged-"):] {
			n = max(n, seq+1)
		}
	}
	if n > 1 {
		dst = fmt.Sprintf("%s-%d", base, n)
	}
	if err := os.Rename(path, dst); err != nil {
		return nil, nil, fmt.Errorf("store: %s is damaged (%s) and could not be set aside: %w; move it away by hand", path, chk.summary(), err)
	}
	// Its journal goes with it: the salvage applies the records the
	// damaged file had not taken, and the fresh database starts a journal
	// of its own.
	if err := os.Rename(JournalPath(path), JournalPath(dst)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, nil, fmt.Errorf("store: set aside the journal of damaged %s: %w; move %s away by hand", path, err, JournalPath(path))
	}
	if err := syncDir(filepath.Dir(path)); err != nil {
		return nil, nil, fmt.Errorf("store: set aside damaged %s: %w", path, err)
	}
	nf, err := lockFile(path, true, opts.Timeout, opts.LockHolder)
	if err != nil {
		return nil, nil, err
	}
	pruneDamaged(path, maxDamagedCopies)
	return nf, &Recovered{
		At: now, DamagedPath: dst, Reason: chk.summary(), Problems: chk.problems,
		ProblemCount: chk.nProblems, UncleanShutdown: unclean,
	}, nil
}

// DamagedCopies lists the damaged copies kept beside the database at path,
// oldest first.
func DamagedCopies(path string) []string {
	all, _ := filepath.Glob(escapeGlob(path) + ".damaged-*")
	all = slices.DeleteFunc(all, func(name string) bool { return strings.HasSuffix(name, ".journal") })
	sort.Slice(all, func(i, j int) bool {
		ti, si := copyOrder(all[i])
		tj, sj := copyOrder(all[j])
		if ti != tj {
			return ti < tj // the UTC timestamp sorts by time
		}
		return si < sj
	})
	return all
}

// copyOrder splits a damaged copy's name into its timestamp and its number
// within that second (1 when it has none).
func copyOrder(name string) (ts string, seq int) {
	_, rest, _ := strings.Cut(filepath.Base(name), ".damaged-")
	ts, n, ok := strings.Cut(rest, "-")
	seq = 1
	if ok {
		if v, err := strconv.Atoi(n); err == nil {
			seq = v
		}
	}
	return ts, seq
}

func escapeGlob(s string) string {
	var b strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`*?[\`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

func pruneDamaged(path string, keep int) {
	all := DamagedCopies(path)
	for len(all) > keep {
		os.Remove(all[0])
		os.Remove(JournalPath(all[0]))
		all = all[1:]
	}
}

// dropOrphanJournal removes the journal kept beside a damaged copy once the
// copy itself was deleted (the way a recovery note is dismissed): alone it
// is 2 MiB that nothing reads.
func dropOrphanJournal(copyPath string) {
	if _, err := os.Lstat(copyPath); errors.Is(err, fs.ErrNotExist) {
		os.Remove(JournalPath(copyPath))
	}
}

// finishRecovery copies what is readable from the damaged copy into the
// fresh database and keeps the note.
//
// The note is written before the copy starts, saying it did not finish, and
// rewritten after: a power cut during the copy leaves a note that says so
// (and the damaged copy, for `perch db salvage`).
func (db *DB) finishRecovery(rec *Recovered) {
	db.recovered = rec
	db.recoveredNow = true
	rec.Salvaged.Error = "interrupted before the copy finished"
	noteErr := db.saveRecovered(rec)
	rep, err := db.salvageFrom(rec.DamagedPath)
	rec.Salvaged = rep
	if err != nil {
		rec.Salvaged.Error = err.Error()
	}
	if err := db.saveRecovered(rec); err != nil && noteErr == nil {
		noteErr = err
	}
	if noteErr != nil {
		rec.Salvaged.Error = strings.TrimPrefix(rec.Salvaged.Error+"; ", "; ") + "keeping the note: " + noteErr.Error()
	}
}

func (db *DB) saveRecovered(rec *Recovered) error {
	data, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	return db.update(func(tx *bolt.Tx) error {
		return tx.Bucket([]byte(BucketMeta)).Put(keyRecovered, data)
	})
}

// RecoveredAtOpen reports whether this Open set a damaged file aside (a
// command-line tool warns then; Recovered also returns earlier recoveries).
func (db *DB) RecoveredAtOpen() bool { return db.recoveredNow }

// Health is the store's readiness check: false with the reason when the
// store is closed or met damage while running (a restart deals with it),
// else true with a message that names no path or session: the recovery, if
// a damaged file was set aside and its copy is still there (the gateway
// serves meanwhile), or the size and session count.
func (db *DB) Health() (ok bool, message string) {
	if err := db.Ping(); err != nil {
		return false, err.Error()
	}
	if err := db.WriteError(); err != nil {
		// Ping, which the watchdog asks, stays ok: a restart would not
		// make room.
		if diskFull(err) {
			return false, err.Error() + "; free space on the disk (the workspace's media/ holds what chats sent): nothing is lost, and what waits goes in once there is room"
		}
		return false, err.Error() + "; what waits stays in the journal (nothing is lost) and is tried again every second"
	}
	if r := db.Recovered(); r != nil {
		return true, r.Message()
	}
	n, noun := db.SessionCount(), "sessions"
	if n == 1 {
		noun = "session"
	}
	return true, fmt.Sprintf("%d %s, %d KiB", n, noun, db.Size()>>10)
}
