package store

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/perchhq/perch/appliance/chat"
)

// SalvageReport counts what a salvage copied out of a damaged file and what
// it had to leave behind.
type SalvageReport struct {
	Sessions int `json:"sessions"`
	// SessionsDamaged counts sessions with damaged pages: some or all of
	// their messages are lost (all of them, and the session itself, when
	// its first page is damaged).
	SessionsDamaged int `json:"sessions_damaged"`
	Messages        int `json:"messages"`
	CronJobs        int `json:"cron_jobs"`
	DeviceRecords   int `json:"device_records"`
	SensorSeries    int `json:"sensor_series"`
	SensorBlocks    int `json:"sensor_blocks"`
	// MessagesLost counts messages that could not be kept: on damaged
	// pages (gaps in a session's sequence, or fewer than the session's
	// record counted), undecodable, or dropped so the history stays one a
	// provider accepts (no tool result without its call, no call without
	// its results, starting with the user).
	MessagesLost int `json:"messages_lost"`
	// LostUncounted is true when damaged pages held more than the counts
	// above can say: sessions the damaged pages listed (never reached), or
	// a damaged session whose own record was lost. MessagesLost is then a
	// lower bound.
	LostUncounted bool `json:"lost_uncounted,omitempty"`
	// RecordsSkipped counts other records that did not decode.
	RecordsSkipped int `json:"records_skipped"`
	// JournalRecords and JournalMessages count the appends taken from the
	// journal beside the damaged file: acknowledged turns that bbolt had
	// not received yet. JournalSkipped says why a journal that was there
	// could not be used.
	JournalRecords  int    `json:"journal_records,omitempty"`
	JournalMessages int    `json:"journal_messages,omitempty"`
	JournalSkipped  string `json:"journal_skipped,omitempty"`
	// Problems is the damage met while reading (at most 50; ProblemCount
	// counts all).
	Problems     []string `json:"problems,omitempty"`
	ProblemCount int      `json:"problem_count"`
	// OlderMeta is true when the tree of the previous transaction gave
	// more than the newest one (the last commit's pages were damaged).
	OlderMeta bool          `json:"older_meta,omitempty"`
	Duration  time.Duration `json:"duration_ns"`
	// Error is set when the copy stopped early (during a recovery at open;
	// Salvage returns it as an error instead).
	Error string `json:"error,omitempty"`
}

// String renders the report for a terminal.
func (r *SalvageReport) String() string {
	lost := fmt.Sprintf("%d lost", r.MessagesLost)
	if r.LostUncounted {
		lost = "at least " + lost
	}
	s := fmt.Sprintf("salvaged %d sessions (%d damaged) with %d messages (%s), %d cron jobs, %d device records, %d sensor series; %d other records skipped; %d problems met in %s",
		r.Sessions, r.SessionsDamaged, r.Messages, lost, r.CronJobs, r.DeviceRecords, r.SensorSeries, r.RecordsSkipped, r.ProblemCount, r.Duration.Round(time.Millisecond))
	if r.LostUncounted {
		s += "; damaged pages held sessions or messages that cannot be counted: they are lost too"
	}
	if r.OlderMeta {
		s += " (read from the previous transaction's tree)"
	}
	if r.JournalRecords > 0 {
		s += fmt.Sprintf("; %d messages added from the journal", r.JournalMessages)
	}
	if r.JournalSkipped != "" {
		s += "; the journal was not used: " + r.JournalSkipped
	}
	return s
}

// Salvage copies whatever is still readable in the database file src into
// a new database at dst: sessions with their messages, cron jobs, device
// records, token totals and sensor history, and then the messages that the
// journal beside src holds and src had not received. dst must not exist,
// and does not after a failed salvage. src is only
// read (under a shared lock: it fails with ErrLocked while a gateway has it
// open). The file is read page by page without bbolt, so damage anywhere
// costs only the records on the damaged pages.
//
// To put the result in place: stop the gateway, move perch.db away, move
// dst to perch.db, start the gateway.
func Salvage(src, dst string) (*SalvageReport, error) {
	if _, err := os.Lstat(dst); err == nil {
		return nil, fmt.Errorf("store: salvage into %s: the file exists; name a new file", dst)
	}
	db, err := Open(dst, Options{NoRecover: true, CacheSessions: -1})
	if err != nil {
		return nil, err
	}
	rep, err := db.salvageFrom(src)
	cerr := db.Close()
	if err == nil {
		err = cerr
	}
	if err != nil {
		// Nothing is left that could pass for a copy: a database that
		// took nothing, or part of the records, checks as sound, and
		// moved into place it would replace what it was meant to save.
		for _, p := range []string{dst, JournalPath(dst), markerPath(dst)} {
			os.Remove(p)
		}
		return &rep, err
	}
	// Closed cleanly: no marker is the same as one saying so, and the file
	// is meant to be moved into place without it.
	os.Remove(markerPath(dst))
	return &rep, nil
}

// salvageFrom copies the readable records of the file at path into db.
func (db *DB) salvageFrom(path string) (rep SalvageReport, err error) {
	start := time.Now()
	defer func() { rep.Duration = time.Since(start) }()
	f, err := lockFile(path, false, time.Second, nil)
	if err != nil {
		return rep, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return rep, fmt.Errorf("store: salvage %s: %w", path, err)
	}
	r, unmap := loadFile(f, st.Size())
	defer unmap()
	metas, metaProblems := readMetas(r, st.Size())
	if len(metas) == 0 {
		rep.Problems, rep.ProblemCount = metaProblems, len(metaProblems)
		return rep, fmt.Errorf("store: salvage %s: no valid meta page, nothing can be read: %v", path, errors.Join(toErrors(metaProblems)...))
	}
	// The newest transaction's tree first. When it is damaged, the
	// previous transaction's tree is usually intact (its pages are not
	// reused before the transaction after it), so count what each gives
	// and copy from the better one.
	chosen := metas[0]
	if len(metas) == 2 {
		newest := dryRun(r, st.Size(), metas[0])
		if newest.problems > 0 {
			if older := dryRun(r, st.Size(), metas[1]); older.records > newest.records {
				chosen = metas[1]
				rep.OlderMeta = true
			}
		}
	}
	v := &salvageVisitor{db: db, rep: &rep, mtime: st.ModTime().UTC()}
	w := newWalker(r, st.Size(), chosen, v)
	w.run()
	v.flush()
	if w.nProblems > 0 && (!v.sawSessions || v.sessionsProblems > v.inSessions) {
		// Sessions were listed on pages that are lost: neither they nor
		// their messages were reached, and nothing says how many.
		rep.LostUncounted = true
	}
	rep.Problems = append(rep.Problems, w.problems...)
	rep.ProblemCount += w.nProblems
	if len(rep.Problems) > maxProblems {
		rep.Problems = rep.Problems[:maxProblems]
	}
	if v.err != nil {
		return rep, fmt.Errorf("store: salvage into %s: %w", db.path, v.err)
	}
	mark := v.journalMark
	if mark == nil && v.metaSound {
		mark = new(uint64)
	}
	if err := db.salvageJournal(JournalPath(path), mark, &rep); err != nil {
		return rep, err
	}
	db.sessions.Store(int64(db.countSessions()))
	return rep, nil
}

// salvageJournal applies the records of the journal at jpath that the
// damaged file had not taken (those above mark, the sequence number its
// last commit recorded): the latest turns, acknowledged to their senders,
// live only there. Without a readable mark nothing is applied, since a
// record applied twice would repeat messages in a history.
func (db *DB) salvageJournal(jpath string, mark *uint64, rep *SalvageReport) error {
	if _, err := os.Stat(jpath); err != nil {
		return nil
	}
	if mark == nil {
		rep.JournalSkipped = "the damaged file's record of which journal entries it holds is unreadable"
		return nil
	}
	recs, err := readJournal(jpath, *mark)
	if err != nil {
		rep.JournalSkipped = err.Error()
		return nil
	}
	if len(recs) == 0 {
		return nil
	}
	err = db.bolt.Update(func(tx *bolt.Tx) error {
		_, err := db.applyJournal(tx, recs)
		return err
	})
	if err != nil {
		return fmt.Errorf("store: salvage %s into %s: %w", jpath, db.path, err)
	}
	rep.JournalRecords = len(recs)
	for _, r := range recs {
		rep.JournalMessages += len(r.data)
	}
	rep.Messages += rep.JournalMessages
	return nil
}

func toErrors(ss []string) []error {
	out := make([]error, len(ss))
	for i, s := range ss {
		out[i] = errors.New(s)
	}
	return out
}

type dryCount struct{ records, problems int }

// dryRun counts the records a meta's tree yields, writing nothing.
func dryRun(r io.ReaderAt, size int64, m boltMeta) dryCount {
	v := &checkVisitor{full: true, c: &fileCheck{}}
	w := newWalker(r, size, m, v)
	w.run()
	c := v.c.counts
	return dryCount{records: c.messages + c.cron + c.devices + c.sessions, problems: w.nProblems + v.nProblems}
}

// salvageVisitor writes what the walk finds into the new database, a
// session at a time, committing every salvageBatch bytes.
type salvageVisitor struct {
	db    *DB
	rep   *SalvageReport
	mtime time.Time
	err   error

	sess    *salvSession
	ops     []func(*bolt.Tx) error
	opBytes int
	// journalMark is the journal sequence number the file's tree says it
	// holds; metaSound is true when the meta bucket, where it is kept, was
	// read without damage (so a missing mark means none was applied).
	journalMark *uint64
	metaSound   bool
	// sawSessions is set when the sessions bucket was reached;
	// sessionsProblems is the damage met in it, and inSessions the part of
	// that met inside one session's bucket: the rest was on the pages
	// listing the sessions.
	sawSessions                  bool
	sessionsProblems, inSessions int
}

const salvageBatch = 1 << 20

type salvSession struct {
	key  []byte
	info *infoRecord
	seq  uint64
	msgs []salvMsg
	// seen counts the message keys found (decodable or not) and
	// minSeq..maxSeq their range; broken counts keys that are not
	// sequence numbers.
	seen           int
	minSeq, maxSeq uint64
	broken         int
}

type salvMsg struct {
	seq uint64
	raw []byte
	m   chat.Message
}

func (v *salvageVisitor) bucket(path [][]byte, name []byte, seq uint64) bool {
	switch {
	case len(path) == 0:
		switch string(name) {
		case BucketSessions:
			v.sawSessions = true
			return true
		case BucketMeta, BucketCron, BucketDevices, BucketSensors:
			return true
		}
		v.rep.RecordsSkipped++
		return false
	case len(path) == 1 && string(path[0]) == BucketSessions:
		v.sess = &salvSession{key: clone(name)}
		return true
	case len(path) == 2 && string(path[0]) == BucketSessions && string(name) == string(keyMsgs):
		if v.sess != nil {
			v.sess.seq = seq
		}
		return true
	case len(path) >= 1 && string(path[0]) == BucketSensors && len(path) <= 2:
		return true
	}
	v.rep.RecordsSkipped++
	return false
}

func (v *salvageVisitor) bucketEnd(path [][]byte, name []byte, problems int) {
	if len(path) == 0 && string(name) == BucketMeta {
		v.metaSound = problems == 0
	}
	if len(path) == 0 && string(name) == BucketSessions {
		v.sessionsProblems = problems
	}
	if len(path) == 1 && string(path[0]) == BucketSessions && v.sess != nil {
		if problems > 0 {
			v.rep.SessionsDamaged++
			v.inSessions += problems
		}
		v.finishSession(v.sess, problems > 0)
		v.sess = nil
	}
}

func (v *salvageVisitor) kv(path [][]byte, k, val []byte) {
	if v.err != nil {
		return
	}
	top := ""
	if len(path) > 0 {
		top = string(path[0])
	}
	switch {
	case top == BucketMeta && len(path) == 1:
		if string(k) == string(keyUsage) && len(val) == 24 {
			v.put([][]byte{[]byte(BucketMeta)}, k, val)
		}
		if string(k) == string(keyJournal) && len(val) == 8 {
			mark := binary.BigEndian.Uint64(val)
			v.journalMark = &mark
		}
	case (top == BucketCron || top == BucketDevices) && len(path) == 1:
		if !json.Valid(val) {
			v.rep.RecordsSkipped++
			return
		}
		v.put(path, k, val)
		if top == BucketCron {
			v.rep.CronJobs++
		} else {
			v.rep.DeviceRecords++
		}
	case top == BucketSessions && len(path) == 2 && v.sess != nil:
		if string(k) == string(keyInfo) {
			var info infoRecord
			if info.unmarshal(val) == nil {
				v.sess.info = &info
			}
		}
	case top == BucketSessions && len(path) == 3 && v.sess != nil:
		s := v.sess
		if len(k) != 8 {
			s.broken++
			return
		}
		seq := binary.BigEndian.Uint64(k)
		if s.seen == 0 || seq < s.minSeq {
			s.minSeq = seq
		}
		s.maxSeq = max(s.maxSeq, seq)
		s.seen++
		var m chat.Message
		if json.Unmarshal(val, &m) != nil {
			return
		}
		s.msgs = append(s.msgs, salvMsg{seq: seq, raw: clone(val), m: m})
	case top == BucketSensors && len(path) == 3:
		if checkSensorRecord(k, val) != nil {
			v.rep.RecordsSkipped++
			return
		}
		if string(k) == string(keyUnit) {
			v.rep.SensorSeries++
		} else {
			v.rep.SensorBlocks++
		}
		v.put(path, k, val)
	default:
		v.rep.RecordsSkipped++
	}
}

func clone(b []byte) []byte { return append([]byte(nil), b...) }

// put queues one record for the next commit.
func (v *salvageVisitor) put(path [][]byte, k, val []byte) {
	p := make([][]byte, len(path))
	for i := range path {
		p[i] = clone(path[i])
	}
	k, val = clone(k), clone(val)
	v.queue(len(k)+len(val), func(tx *bolt.Tx) error {
		b, err := bucketPath(tx, p)
		if err != nil {
			return err
		}
		return b.Put(k, val)
	})
}

func bucketPath(tx *bolt.Tx, path [][]byte) (*bolt.Bucket, error) {
	b, err := tx.CreateBucketIfNotExists(path[0])
	for _, name := range path[1:] {
		if err != nil {
			return nil, err
		}
		b, err = b.CreateBucketIfNotExists(name)
	}
	return b, err
}

func (v *salvageVisitor) queue(n int, op func(*bolt.Tx) error) {
	v.ops = append(v.ops, op)
	v.opBytes += n
	if v.opBytes >= salvageBatch {
		v.flush()
	}
}

func (v *salvageVisitor) flush() {
	if len(v.ops) == 0 || v.err != nil {
		return
	}
	ops := v.ops
	v.ops, v.opBytes = nil, 0
	v.err = v.db.bolt.Update(func(tx *bolt.Tx) error {
		for _, op := range ops {
			if err := op(tx); err != nil {
				return err
			}
		}
		return nil
	})
}

// finishSession writes one session: the messages that decode, made into a
// history a provider accepts, with an info record rebuilt around them.
func (v *salvageVisitor) finishSession(s *salvSession, damaged bool) {
	// Sequence numbers are consecutive (appends take the next, trims cut
	// the front): a hole in them is messages on a lost page. The session's
	// record counts its messages as of the last commit, which also covers
	// lost pages at either end of the sequence.
	total := s.seen + s.broken
	if s.seen > 0 {
		if span := s.maxSeq - s.minSeq + 1; span > uint64(s.seen) && span-uint64(s.seen) <= 1<<20 {
			total += int(span) - s.seen
		}
	}
	switch {
	case s.info != nil:
		total = max(total, s.info.Count)
	case damaged:
		v.rep.LostUncounted = true
	}
	msgs := wellFormed(s.msgs)
	v.rep.MessagesLost += total - len(msgs)
	if len(msgs) == 0 {
		return
	}
	info := infoRecord{Created: v.mtime, Updated: v.mtime}
	if s.info != nil {
		info = *s.info
	} else {
		if t := msgs[0].m.Time; t > 0 {
			info.Created = time.UnixMilli(t).UTC()
		}
		if t := msgs[len(msgs)-1].m.Time; t > 0 {
			info.Updated = time.UnixMilli(t).UTC()
		}
	}
	info.Count = len(msgs)
	seq := max(s.seq, msgs[len(msgs)-1].seq)
	key := s.key
	infoBytes := info.marshal()
	n := len(infoBytes)
	for _, m := range msgs {
		n += len(m.raw) + 8
	}
	v.rep.Sessions++
	v.rep.Messages += len(msgs)
	v.queue(n, func(tx *bolt.Tx) error {
		sess, err := tx.Bucket([]byte(BucketSessions)).CreateBucketIfNotExists(key)
		if err != nil {
			return err
		}
		mb, err := sess.CreateBucketIfNotExists(keyMsgs)
		if err != nil {
			return err
		}
		for _, m := range msgs {
			if err := mb.Put(u64(m.seq), m.raw); err != nil {
				return err
			}
		}
		if err := mb.SetSequence(seq); err != nil {
			return err
		}
		return sess.Put(keyInfo, infoBytes)
	})
}

// wellFormed drops what a provider refuses in a history with holes:
// messages before the first user message, tool results that do not answer
// the assistant message just before them, and assistant tool calls whose
// results are not all there (with those results).
func wellFormed(ms []salvMsg) []salvMsg {
	i := 0
	for i < len(ms) && ms[i].m.Role != "user" {
		i++
	}
	out := make([]salvMsg, 0, len(ms)-i)
	for i < len(ms) {
		m := ms[i].m
		switch {
		case m.Role == "assistant" && len(m.ToolCalls) > 0:
			j := i + 1
			for j < len(ms) && ms[j].m.Role == "tool" {
				j++
			}
			if answered(m.ToolCalls, ms[i+1:j]) {
				out = append(out, ms[i:j]...)
			}
			i = j
		case m.Role == "tool":
			i++ // a result whose call was lost
		default:
			out = append(out, ms[i])
			i++
		}
	}
	return out
}

// answered reports whether results answer every call exactly once and
// nothing else.
func answered(calls []chat.ToolCall, results []salvMsg) bool {
	if len(calls) != len(results) {
		return false
	}
	want := make(map[string]bool, len(calls))
	for _, c := range calls {
		want[c.ID] = true
	}
	for _, r := range results {
		if !want[r.m.ToolCallID] {
			return false
		}
		delete(want, r.m.ToolCallID)
	}
	return len(want) == 0
}
