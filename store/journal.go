package store

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/perchhq/perch/appliance/chat"
	bolt "go.etcd.io/bbolt"
	"golang.org/x/sys/unix"
)

// The journal makes a turn's messages durable with one synced write.
//
// A bbolt commit is two fdatasyncs one after the other (the pages, then the
// meta page that points at them); on an SD card, and on most disks, that
// pair is the largest part of a turn's latency. So a session append is
// first written to the journal, a small preallocated file beside the
// database, and acknowledged once that one write is synced. bbolt receives
// the same appends a little later, many at once, in an ordinary synced
// commit: every commit of the store first applies whatever the journal
// holds that bbolt has not seen, and the highest sequence number applied is
// stored in the same transaction. At open, journal records above that
// number are applied before anything else, so an append acknowledged just
// before a power cut is never lost and never applied twice.
//
// The file is preallocated (zeros written once), so a journal write
// overwrites blocks that already belong to the file and fdatasync has no
// file-size change to push through the filesystem's own journal. It is two
// halves used in turn: a half is reused only after everything it holds is
// in bbolt. A record is [length][crc32c][seq][body]; a half is read from
// its start until a record is torn, fails its checksum or breaks the run of
// sequence numbers, which is how records of an earlier round are told from
// the current one.
//
// Readers never look at the journal: a session with appends in it but not
// yet in bbolt is kept (pinned) in the history cache, already updated, and
// reads that go to bbolt for sessions apply the journal first (settle).

const (
	journalMagic  = "perch journal 1\n"
	journalHeader = 4096
	journalSize   = journalHeader + 2*journalHalf
	// journalHalf is one half's size: a few seconds of turns at full load,
	// while the background apply empties it every journalDelay.
	journalHalf = 1 << 20
	// journalDelay is how long appends gather before a background commit
	// puts them into bbolt; a read that needs bbolt current does not wait
	// for it (settle).
	journalDelay = 50 * time.Millisecond
	// journalMaxRecord bounds one record; a larger append (a very long
	// message) is committed to bbolt directly.
	journalMaxRecord = journalHalf / 4
	recordHead       = 8 // length, crc
)

// crcTable is made on first use, off the start-up path of a board whose
// journal is empty.
var crcTable = sync.OnceValue(func() *crc32.Table { return crc32.MakeTable(crc32.Castagnoli) })

var keyJournal = []byte("journal")

// JournalPath is the journal's file beside the database at path. It holds
// the latest messages, so whatever keeps the database private keeps it
// private too.
func JournalPath(path string) string { return path + ".journal" }

// appendRec is one session append: what Append was given, plus the time
// it was made, so replaying it writes the same record.
type appendRec struct {
	seq    uint64
	key    string
	msgs   []chat.Message
	data   [][]byte // msgs as JSON
	usage  chat.Usage
	limit  int
	now    time.Time
	route  bool
	ch, id string
}

func (r *appendRec) encode(b []byte) []byte {
	start := len(b)
	b = append(b, make([]byte, recordHead)...)
	b = binary.BigEndian.AppendUint64(b, r.seq)
	b = binary.AppendUvarint(b, uint64(len(r.key)))
	b = append(b, r.key...)
	b = binary.AppendUvarint(b, uint64(r.limit))
	b = binary.AppendVarint(b, r.now.UnixNano())
	b = binary.AppendVarint(b, r.usage.PromptTokens)
	b = binary.AppendVarint(b, r.usage.CompletionTokens)
	b = binary.AppendVarint(b, r.usage.TotalTokens)
	if r.route {
		b = append(b, 1)
		b = binary.AppendUvarint(b, uint64(len(r.ch)))
		b = append(b, r.ch...)
		b = binary.AppendUvarint(b, uint64(len(r.id)))
		b = append(b, r.id...)
	} else {
		b = append(b, 0)
	}
	b = binary.AppendUvarint(b, uint64(len(r.data)))
	for _, d := range r.data {
		b = binary.AppendUvarint(b, uint64(len(d)))
		b = append(b, d...)
	}
	body := b[start+recordHead:]
	binary.BigEndian.PutUint32(b[start:], uint32(len(body)))
	binary.BigEndian.PutUint32(b[start+4:], crc32.Checksum(body, crcTable()))
	return b
}

// encodedSize is the record's size without encoding it.
func (r *appendRec) encodedSize() int {
	n := recordHead + 8 + 10 + len(r.key) + 10 + 4*10 + 1 + 20 + len(r.ch) + len(r.id) + 10
	for _, d := range r.data {
		n += 10 + len(d)
	}
	return n
}

var (
	errRecord = errors.New("bad record")
	errShort  = errors.New("record runs past what was read")
)

// decodeRecord reads the record at the start of b: it returns the record
// and its length, or errRecord where no whole, intact record starts.
func decodeRecord(b []byte) (*appendRec, int, error) {
	if len(b) < recordHead+8 {
		return nil, 0, errShort
	}
	n := int(binary.BigEndian.Uint32(b))
	if n < 8 || n > journalHalf {
		return nil, 0, errRecord
	}
	if n > len(b)-recordHead {
		return nil, 0, errShort
	}
	body := b[recordHead : recordHead+n]
	if crc32.Checksum(body, crcTable()) != binary.BigEndian.Uint32(b[4:]) {
		return nil, 0, errRecord
	}
	r := &appendRec{seq: binary.BigEndian.Uint64(body)}
	f := fields{b: body[8:]}
	r.key = f.str()
	r.limit = int(f.uvarint())
	r.now = time.Unix(0, f.varint()).UTC()
	r.usage = chat.Usage{PromptTokens: f.varint(), CompletionTokens: f.varint(), TotalTokens: f.varint()}
	if len(f.b) == 0 {
		return nil, 0, errRecord
	}
	route := f.b[0]
	f.b = f.b[1:]
	if route > 1 {
		return nil, 0, errRecord
	}
	if route == 1 {
		r.route = true
		r.ch, r.id = f.str(), f.str()
	}
	count := f.uvarint()
	if count > uint64(len(f.b)) {
		return nil, 0, errRecord
	}
	for range count {
		r.data = append(r.data, append([]byte(nil), f.bytes()...))
	}
	if f.bad || len(f.b) != 0 || r.key == "" {
		return nil, 0, errRecord
	}
	return r, recordHead + n, nil
}

// journal is the open journal file and the appends that are durable in it
// but not yet in bbolt.
type journal struct {
	f *os.File

	mu      sync.Mutex
	queue   []*jwrite
	busy    bool
	cur     int       // the half being written
	off     int64     // where the next record goes
	seq     uint64    // the last sequence number given out
	last    [2]uint64 // the highest sequence number in each half
	pending []*appendRec
	applied uint64 // the highest sequence number bbolt has
	failed  error  // set when a write or sync failed: the file's tail is unknown
	ready   bool   // the file is whole; until then appends go to bbolt
	kick    chan struct{}
	buf     []byte
}

type jwrite struct {
	rec  *appendRec
	done chan error
}

func halfStart(h int) int64 { return journalHeader + int64(h)*journalHalf }

// openJournal opens the journal at path and reads what it holds above
// applied. A file that is not a journal is renamed aside. A missing or
// short file holds nothing acknowledged (records are written only once it
// is whole): it is made whole in the background (prepare), and appends go
// to bbolt directly until then, so a first start does not wait for it.
func openJournal(path string, applied uint64) (*journal, []*appendRec, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, nil, fmt.Errorf("store: journal %s: %w", path, err)
	}
	j := &journal{f: f, applied: applied, seq: applied, kick: make(chan struct{}, 1)}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, fmt.Errorf("store: journal %s: %w", path, err)
	}
	if st.Size() > 0 && !hasJournalHeader(f) {
		// Not ours, or torn before its header was written: nothing in it
		// was ever acknowledged, but keep it for a look.
		f.Close()
		os.Rename(path, path+".damaged-"+time.Now().UTC().Format("20060102T150405Z"))
		return openJournal(path, applied)
	}
	if st.Size() < journalSize {
		j.cur, j.off = 0, halfStart(0)
		return j, nil, nil
	}
	recs, err := j.scan()
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	j.ready = true
	return j, recs, nil
}

// prepare makes the file whole when openJournal found it missing or short,
// and then lets appends use it.
func (j *journal) prepare() error {
	j.mu.Lock()
	ready := j.ready
	j.mu.Unlock()
	if ready {
		return nil
	}
	st, err := j.f.Stat()
	if err != nil {
		return err
	}
	if err := preallocate(j.f, st.Size(), journalSize); err != nil {
		return fmt.Errorf("store: make journal %s: %w", j.f.Name(), err)
	}
	j.mu.Lock()
	j.ready = true
	j.mu.Unlock()
	return nil
}

// retire marks every record as applied in the file itself, after a clean
// close applied them all, so the next open reads two empty halves instead
// of up to 2 MiB of records it would only skip (on a cold SD card that is a
// tenth of a second of start-up).
func (j *journal) retire() {
	j.mu.Lock()
	ok := j.ready && j.failed == nil && len(j.pending) == 0 && !j.busy
	j.mu.Unlock()
	if !ok {
		return
	}
	zero := make([]byte, recordHead)
	if _, err := j.f.WriteAt(zero, halfStart(0)); err != nil {
		return
	}
	if _, err := j.f.WriteAt(zero, halfStart(1)); err != nil {
		return
	}
	_ = unix.Fdatasync(int(j.f.Fd()))
}

// preallocate writes the header and zeros up to size, and syncs the file
// and its directory, so that later writes only overwrite.
func preallocate(f *os.File, from, size int64) error {
	if from < journalHeader {
		hdr := make([]byte, journalHeader)
		copy(hdr, journalMagic)
		if _, err := f.WriteAt(hdr, 0); err != nil {
			return err
		}
		from = journalHeader
	}
	zeros := make([]byte, 64<<10)
	for off := from; off < size; off += int64(len(zeros)) {
		n := min(int64(len(zeros)), size-off)
		if _, err := f.WriteAt(zeros[:n], off); err != nil {
			return err
		}
	}
	if err := f.Truncate(size); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return err
	}
	d, err := os.Open(filepath.Dir(f.Name()))
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// scan reads both halves and returns the records above j.applied in
// sequence order, stopping at the first gap. It sets where writing goes on:
// after the newest record.
func (j *journal) scan() ([]*appendRec, error) {
	var all []*appendRec
	var ends [2]int64
	for h := range 2 {
		recs, end, err := j.scanHalf(h)
		if err != nil {
			return nil, err
		}
		if len(recs) > 0 {
			j.last[h] = recs[len(recs)-1].seq
		}
		all = append(all, recs...)
		ends[h] = end
	}
	sort.Slice(all, func(a, b int) bool { return all[a].seq < all[b].seq })
	var out []*appendRec
	want := j.applied + 1
	for _, r := range all {
		j.seq = max(j.seq, r.seq)
		if r.seq < want {
			continue
		}
		if r.seq != want {
			break // a gap: nothing after it can be trusted to be in order
		}
		out = append(out, r)
		want++
	}
	// Go on after the newest record, in its half.
	if j.last[1] > j.last[0] {
		j.cur, j.off = 1, ends[1]
	} else {
		j.cur, j.off = 0, ends[0]
	}
	return out, nil
}

// scanHalf reads half h's run of records from its start, reading more of
// the half only while the run goes on.
func (j *journal) scanHalf(h int) ([]*appendRec, int64, error) {
	for size := int64(4 << 10); ; size *= 8 {
		size = min(size, journalHalf)
		buf := make([]byte, size)
		if _, err := j.f.ReadAt(buf, halfStart(h)); err != nil {
			return nil, 0, fmt.Errorf("store: read journal: %w", err)
		}
		var recs []*appendRec
		off := 0
		var err error
		for {
			var r *appendRec
			var n int
			r, n, err = decodeRecord(buf[off:])
			if err != nil || (len(recs) > 0 && r.seq != recs[len(recs)-1].seq+1) {
				break
			}
			recs = append(recs, r)
			off += n
		}
		// Only a record cut off by the end of what was read needs more.
		if err != errShort || size == journalHalf {
			return recs, halfStart(h) + int64(off), nil
		}
	}
}

func (j *journal) close() error { return j.f.Close() }

// hasJournalHeader reports whether f starts as a journal does.
func hasJournalHeader(f *os.File) bool {
	head := make([]byte, len(journalMagic))
	_, err := f.ReadAt(head, 0)
	return err == nil && string(head) == journalMagic
}

// readJournal returns the records of the journal at path above applied,
// without changing the file (a salvage reads a damaged database's journal).
func readJournal(path string, applied uint64) ([]*appendRec, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("store: journal %s: %w", path, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("store: journal %s: %w", path, err)
	}
	if !hasJournalHeader(f) {
		return nil, fmt.Errorf("store: %s is not a journal", path)
	}
	if st.Size() < journalSize {
		// Records are written only once the file is whole.
		return nil, nil
	}
	j := &journal{f: f, applied: applied, seq: applied}
	return j.scan()
}

// journalWrite makes rec durable in the journal. It fails when the next
// half still holds records bbolt has not taken and cannot take them (a
// full disk), or when the file's write or sync failed; after the latter the
// journal is out of use and appends go to bbolt directly.
//
// Writes are group-committed the way bbolt writes are: the writer that
// finds the journal idle writes what is queued with one write and one
// fdatasync; on success each record's after runs in sequence order before
// any writer is told.
func (db *DB) journalWrite(rec *appendRec) error {
	j := db.journal
	w := &jwrite{rec: rec, done: make(chan error, 1)}
	j.mu.Lock()
	if j.failed != nil {
		j.mu.Unlock()
		return j.failed
	}
	j.queue = append(j.queue, w)
	if j.busy {
		j.mu.Unlock()
		return <-w.done
	}
	j.busy = true
	j.mu.Unlock()
	db.journalFlush()
	return <-w.done
}

// journalFlush writes queued records until the queue is empty; the caller
// set j.busy.
func (db *DB) journalFlush() {
	j := db.journal
	j.mu.Lock()
	for len(j.queue) > 0 {
		batch := j.queue
		j.queue = nil
		j.mu.Unlock()
		db.journalBatch(batch)
		j.mu.Lock()
	}
	j.busy = false
	j.mu.Unlock()
}

// journalBatch writes one batch. Only the busy writer calls it, so cur,
// off, seq and buf are its own.
func (db *DB) journalBatch(batch []*jwrite) {
	j := db.journal
	for len(batch) > 0 {
		// Take what fits in the rest of this half; switch halves when
		// not even the first record fits.
		end := halfStart(j.cur) + journalHalf
		if j.off+int64(batch[0].rec.encodedSize()) > end {
			if err := db.journalSwitch(); err != nil {
				for _, w := range batch {
					w.done <- err
				}
				return
			}
			end = halfStart(j.cur) + journalHalf
		}
		j.buf = j.buf[:0]
		n := 0
		seq := j.seq
		for _, w := range batch {
			if j.off+int64(len(j.buf)+w.rec.encodedSize()) > end {
				break
			}
			seq++
			w.rec.seq = seq
			j.buf = w.rec.encode(j.buf)
			n++
		}
		part := batch[:n]
		batch = batch[n:]
		_, err := j.f.WriteAt(j.buf, j.off)
		if err == nil {
			err = unix.Fdatasync(int(j.f.Fd()))
		}
		if err != nil {
			// The tail of the file is unknown now (a failed fdatasync
			// may have dropped the pages): every later append goes
			// straight to bbolt.
			err = fmt.Errorf("store: journal write: %w", err)
			j.mu.Lock()
			j.failed = err
			j.mu.Unlock()
			for _, w := range part {
				w.done <- err
			}
			for _, w := range batch {
				w.done <- err
			}
			return
		}
		j.off += int64(len(j.buf))
		j.seq = seq
		j.last[j.cur] = seq
		recs := make([]*appendRec, len(part))
		for i, w := range part {
			recs[i] = w.rec
			db.cache.appendedPinned(w.rec.key, w.rec.msgs, w.rec.limit)
		}
		j.mu.Lock()
		j.pending = append(j.pending, recs...)
		j.mu.Unlock()
		select {
		case j.kick <- struct{}{}:
		default:
		}
		for _, w := range part {
			w.done <- nil
		}
	}
}

// journalSwitch moves writing to the other half, first making bbolt take
// what that half still holds.
func (db *DB) journalSwitch() error {
	j := db.journal
	other := 1 - j.cur
	j.mu.Lock()
	need := j.last[other] > j.applied
	j.mu.Unlock()
	if need {
		if err := db.settle(); err != nil {
			if diskFull(err) {
				return fmt.Errorf("store: the disk is full and the journal has no room left: free space on the disk (nothing already answered is lost): %w", err)
			}
			return fmt.Errorf("store: journal full and the database did not take its records: %w", err)
		}
	}
	j.cur, j.off = other, halfStart(other)
	return nil
}

// unapplied is a snapshot of the durable records bbolt has not taken.
func (j *journal) unapplied() []*appendRec {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.pending[:len(j.pending):len(j.pending)]
}

// usable reports whether appends may go through the journal.
func (j *journal) usable() bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.ready && j.failed == nil
}

// hasPending reports whether bbolt is behind the journal.
func (j *journal) hasPending() bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	return len(j.pending) > 0
}

// taken drops recs, now committed to bbolt, from pending.
func (j *journal) taken(recs []*appendRec) {
	if len(recs) == 0 {
		return
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	j.applied = max(j.applied, recs[len(recs)-1].seq)
	rest := j.pending[len(recs):]
	if len(rest) == 0 {
		j.pending = nil
	} else {
		j.pending = append([]*appendRec(nil), rest...)
	}
}

// openJournal opens the journal beside the database, applies to bbolt what
// it holds that bbolt lacks, and starts the background apply. After a
// damaged database was set aside, the journal's sequence numbers belong to
// that file, so the journal is set aside too (perch.db.journal.damaged-…).
func (db *DB) openJournal() error {
	jpath := JournalPath(db.path)
	var applied uint64
	err := db.bolt.View(func(tx *bolt.Tx) error {
		if v := tx.Bucket([]byte(BucketMeta)).Get(keyJournal); len(v) == 8 {
			applied = binary.BigEndian.Uint64(v)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("store: open journal: %w", err)
	}
	j, recs, err := openJournal(jpath, applied)
	if err != nil {
		return err
	}
	held := false
	if len(recs) > 0 {
		var res journalApply
		err := db.bolt.Update(func(tx *bolt.Tx) error {
			var err error
			res, err = db.applyJournal(tx, recs)
			return err
		})
		switch {
		case err != nil && diskFull(err):
			// The records are safe in the journal; failing the open
			// would stop the board serving at all (no page, no
			// /ready), restart after restart, over a disk that needs a
			// file deleted. They wait, as records of this run do, and
			// go in once there is room; the store's health says so.
			j.pending = recs
			held = true
			err = fmt.Errorf("store: the disk is full: %d records of the last run wait in the journal until %s can take them: %w", len(recs), db.path, err)
			db.writeErr.Store(&err)
		case err != nil:
			j.close()
			return fmt.Errorf("store: replay %d journal records into %s: %w", len(recs), db.path, err)
		default:
			j.applied = recs[len(recs)-1].seq
			db.sessions.Add(int64(len(res.created)))
			db.replayed = len(recs)
		}
	}
	db.journal = j
	if held {
		db.holdInCache(recs)
	}
	db.applierStop, db.applierDone = make(chan struct{}), make(chan struct{})
	go db.applyLoop(db.applierStop, db.applierDone)
	if held {
		j.kick <- struct{}{}
	}
	return nil
}

// holdInCache puts records bbolt could not take at open into their
// sessions' cached histories, pinned until bbolt takes them, as this run's
// own journaled appends are: reads must see them (a turn's context, the
// check that a message sent again is the one still unanswered), though
// bbolt has not got them.
func (db *DB) holdInCache(recs []*appendRec) {
	for _, r := range recs {
		if _, err := db.History(r.key); err != nil || !db.cache.pin(r.key) {
			continue
		}
		msgs := make([]chat.Message, len(r.data))
		for i, d := range r.data {
			json.Unmarshal(d, &msgs[i]) // written by this code: it decodes
		}
		db.cache.appendedPinned(r.key, msgs, r.limit)
	}
}

// DiskFull reports whether err is the file system out of room.
func DiskFull(err error) bool { return err != nil && diskFull(err) }

// diskFull reports whether err is the file system out of room. bbolt
// formats some of its errors with %s, so the words are matched too.
func diskFull(err error) bool {
	if errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) {
		return true
	}
	msg := err.Error()
	return strings.Contains(msg, syscall.ENOSPC.Error()) || strings.Contains(msg, syscall.EDQUOT.Error())
}

// WriteError is why the database has not been taking what the journal
// holds (a full disk), or nil: appends are durable meanwhile, until the
// journal fills, but nothing else can be written.
func (db *DB) WriteError() error {
	if p := db.writeErr.Load(); p != nil {
		return *p
	}
	return nil
}

// tookRecords notes that bbolt took what the journal held.
func (db *DB) tookRecords() {
	was := db.writeErr.Swap(nil)
	if was != nil && db.onWriteError != nil {
		db.onWriteError(nil)
	}
}

// failedRecords notes that bbolt did not take what the journal holds.
func (db *DB) failedRecords(err error) {
	if was := db.writeErr.Swap(&err); was == nil && db.onWriteError != nil {
		db.onWriteError(err)
	}
}

// Replayed is how many journal records Open applied that the last run had
// acknowledged but not yet put into bbolt (after a crash or power cut).
func (db *DB) Replayed() int { return db.replayed }

// applyLoop puts journal records into bbolt journalDelay after they
// arrive, many at a time. A failed commit (a full disk) is retried every
// second; meanwhile appends still succeed until a journal half is full.
func (db *DB) applyLoop(stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	if err := db.journal.prepare(); err != nil {
		// Appends keep going to bbolt directly, as they did before the
		// journal existed; the reason shows in the session check.
		db.journal.mu.Lock()
		db.journal.failed = err
		db.journal.mu.Unlock()
		return
	}
	for {
		select {
		case <-stop:
			return
		case <-db.journal.kick:
		}
		wait := journalDelay
		for {
			select {
			case <-stop:
				return
			case <-time.After(wait):
			}
			err := db.settle()
			if err == nil {
				db.tookRecords()
				break
			}
			db.failedRecords(err)
			wait = time.Second
		}
	}
}

// settle puts every journal record into bbolt, for reads that go to bbolt
// for sessions (listings, totals, the idle sweep).
func (db *DB) settle() error {
	if db.journal == nil || !db.journal.hasPending() {
		return nil
	}
	return db.update(func(*bolt.Tx) error { return nil })
}
