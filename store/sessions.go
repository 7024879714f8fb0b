package store

import (
	"github.com/perchhq/perch/appliance/chat"

	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"time"

	bolt "go.etcd.io/bbolt"
)

// SessionInfo summarises a session.
type SessionInfo struct {
	Key      string     `json:"key"`
	Count    int        `json:"message_count"`
	Created  time.Time  `json:"created"`
	Updated  time.Time  `json:"updated"`
	Usage    chat.Usage `json:"usage"`
	Channel  string     `json:"channel,omitempty"`
	ChatID   string     `json:"chat_id,omitempty"`
	External bool       `json:"-"`
}

// infoRecord is a session's summary, rewritten by every append; it is
// binary because it is decoded and encoded inside the write transaction of
// every turn.
type infoRecord struct {
	Count   int
	Created time.Time
	Updated time.Time
	Usage   chat.Usage
	Channel string
	ChatID  string
}

const infoVersion = 1

func (r *infoRecord) marshal() []byte {
	b := make([]byte, 0, 64+len(r.Channel)+len(r.ChatID))
	b = append(b, infoVersion)
	b = binary.AppendUvarint(b, uint64(r.Count))
	b = binary.AppendVarint(b, r.Created.UnixNano())
	b = binary.AppendVarint(b, r.Updated.UnixNano())
	b = binary.AppendVarint(b, r.Usage.PromptTokens)
	b = binary.AppendVarint(b, r.Usage.CompletionTokens)
	b = binary.AppendVarint(b, r.Usage.TotalTokens)
	b = binary.AppendUvarint(b, uint64(len(r.Channel)))
	b = append(b, r.Channel...)
	b = binary.AppendUvarint(b, uint64(len(r.ChatID)))
	return append(b, r.ChatID...)
}

var errDamagedInfo = errors.New("damaged session info record")

func (r *infoRecord) unmarshal(b []byte) error {
	if len(b) == 0 || b[0] != infoVersion {
		return errDamagedInfo
	}
	f := fields{b: b[1:]}
	r.Count = int(f.uvarint())
	r.Created = time.Unix(0, f.varint()).UTC()
	r.Updated = time.Unix(0, f.varint()).UTC()
	r.Usage = chat.Usage{PromptTokens: f.varint(), CompletionTokens: f.varint(), TotalTokens: f.varint()}
	r.Channel = f.str()
	r.ChatID = f.str()
	if f.bad {
		return errDamagedInfo
	}
	return nil
}

// Append adds msgs to session key durably, adds usage to the session's and
// the global totals, and trims the session to its last limit messages
// (never fewer than 100), dropping leading messages that are not from the
// user so the history never starts with an orphan tool result. route, when
// non-empty, records the (channel, chat) the session talks on.
//
// A session whose history is in the cache is appended through the journal
// (journal.go): one synced write, bbolt a moment later. Others, and appends
// too large for the journal, are committed to bbolt directly.
func (db *DB) Append(key string, msgs []chat.Message, usage chat.Usage, limit int, route ...string) error {
	if limit < 100 {
		limit = 100
	}
	if key == "" || len(key) > bolt.MaxKeySize {
		return fmt.Errorf("store: append: session key must be 1 to %d bytes, not %d", bolt.MaxKeySize, len(key))
	}
	rec := &appendRec{key: key, msgs: msgs, usage: usage, limit: limit, now: time.Now().UTC(), data: make([][]byte, len(msgs))}
	for i, m := range msgs {
		b, err := json.Marshal(m)
		if err != nil {
			return fmt.Errorf("store: encode message: %w", err)
		}
		rec.data[i] = b
	}
	if len(route) == 2 {
		rec.route, rec.ch, rec.id = true, route[0], route[1]
	}
	if db.journal != nil && rec.encodedSize() <= journalMaxRecord && db.journal.usable() && db.cache.pin(key) {
		err := db.journalWrite(rec)
		if err != nil {
			db.cache.unpin(key)
			return fmt.Errorf("store: append to session %q: %w", key, err)
		}
		return nil
	}
	var res appendResult
	err := db.update(func(tx *bolt.Tx) error {
		var err error
		res, err = appendTx(tx, rec, false)
		return err
	})
	if err != nil {
		return fmt.Errorf("store: append to session %q: %w", key, err)
	}
	if res.created {
		db.sessions.Add(1)
	}
	db.cache.appended(key, msgs, res.trimmed)
	return nil
}

type appendResult struct {
	created bool
	trimmed int
}

// appendTx writes rec into tx. With repair, a damaged info record is
// rebuilt from the messages instead of failing the append: a journal record
// was acknowledged already and must not be refused later.
func appendTx(tx *bolt.Tx, rec *appendRec, repair bool) (appendResult, error) {
	var res appendResult
	key := rec.key
	sb := tx.Bucket([]byte(BucketSessions))
	sess := sb.Bucket([]byte(key))
	res.created = sess == nil
	var info infoRecord
	if sess != nil {
		if v := sess.Get(keyInfo); v != nil {
			if err := info.unmarshal(v); err != nil {
				if !repair {
					return res, fmt.Errorf("session %q info: %w", key, err)
				}
				info = infoRecord{Created: rec.now}
				if mb := sess.Bucket(keyMsgs); mb != nil {
					info.Count = mb.Stats().KeyN
				}
			}
		} else {
			info.Created = rec.now
		}
	} else {
		info.Created = rec.now
	}
	sess, err := sb.CreateBucketIfNotExists([]byte(key))
	if err != nil {
		return res, err
	}
	mb, err := sess.CreateBucketIfNotExists(keyMsgs)
	if err != nil {
		return res, err
	}
	for _, data := range rec.data {
		seq, err := mb.NextSequence()
		if err != nil {
			return res, err
		}
		if err := mb.Put(u64(seq), data); err != nil {
			return res, err
		}
	}
	info.Count += len(rec.data)
	if limit := rec.limit; info.Count > limit {
		// Trim in chunks: deleting from the front rewrites the first
		// leaf page, and doing it on every append would add a page write
		// to every turn's commit. The history stays between limit-slack
		// and limit messages, never under 100.
		res.trimmed, err = trim(mb, info.Count-limit+trimSlackFor(limit))
		if err != nil {
			return res, err
		}
		info.Count -= res.trimmed
	}
	info.Updated = rec.now
	info.Usage = info.Usage.Add(rec.usage)
	if rec.route {
		info.Channel, info.ChatID = rec.ch, rec.id
	}
	if err := sess.Put(keyInfo, info.marshal()); err != nil {
		return res, err
	}
	if rec.usage != (chat.Usage{}) {
		meta := tx.Bucket([]byte(BucketMeta))
		total := decodeUsage(meta.Get(keyUsage)) // a damaged total restarts from zero
		if err := meta.Put(keyUsage, encodeUsage(total.Add(rec.usage))); err != nil {
			return res, err
		}
	}
	return res, nil
}

// journalApply is what applying journal records in a commit did.
type journalApply struct {
	created []string
}

// applyJournal writes recs, the journal's records bbolt has not taken, into
// tx ahead of the commit's own writes, and records the highest sequence
// number in the same transaction.
func (db *DB) applyJournal(tx *bolt.Tx, recs []*appendRec) (journalApply, error) {
	var out journalApply
	if len(recs) == 0 {
		return out, nil
	}
	for _, r := range recs {
		res, err := appendTx(tx, r, true)
		if err != nil {
			return out, fmt.Errorf("store: apply journal record %d (session %q): %w", r.seq, r.key, err)
		}
		if res.created {
			out.created = append(out.created, r.key)
		}
	}
	return out, tx.Bucket([]byte(BucketMeta)).Put(keyJournal, u64(recs[len(recs)-1].seq))
}

// journalTaken follows a commit that applied recs.
func (db *DB) journalTaken(recs []*appendRec, applied journalApply) {
	if len(recs) == 0 {
		return
	}
	db.journal.taken(recs)
	db.sessions.Add(int64(len(applied.created)))
	for _, r := range recs {
		db.cache.unpin(r.key)
	}
}

// trimSlack is how far below history_limit a trim goes.
const trimSlack = 32

func trimSlackFor(limit int) int { return min(trimSlack, limit-100) }

// trim deletes at least n messages from the front, then any leading
// non-user messages, and returns how many it deleted.
func trim(mb *bolt.Bucket, n int) (int, error) {
	c := mb.Cursor()
	deleted := 0
	for k, v := c.First(); k != nil; k, v = c.First() {
		if deleted >= n {
			var m struct {
				Role string `json:"role"`
			}
			if json.Unmarshal(v, &m) == nil && m.Role == "user" {
				break
			}
		}
		if err := c.Delete(); err != nil {
			return deleted, err
		}
		deleted++
	}
	return deleted, nil
}

// DropCachedHistories empties the history cache but for the sessions whose
// appends bbolt has not taken yet, for a board gone idle: under load the
// cache saves a read per turn, idle it keeps thousands of small objects
// strewn over the heap's spans, so no span can go back to the kernel. It
// returns how many sessions it dropped; their next turn reads them again.
func (db *DB) DropCachedHistories() int { return db.cache.dropUnpinned() }

// History returns the stored messages of session key, oldest first. The
// slice is the caller's.
func (db *DB) History(key string) ([]chat.Message, error) {
	if msgs, ok := db.cache.get(key); ok {
		return msgs, nil
	}
	db.cache.beginLoad(key)
	var out []chat.Message
	err := db.bolt.View(func(tx *bolt.Tx) error {
		sess := tx.Bucket([]byte(BucketSessions)).Bucket([]byte(key))
		if sess == nil {
			return nil
		}
		mb := sess.Bucket(keyMsgs)
		if mb == nil {
			return nil
		}
		out = make([]chat.Message, 0, mb.Stats().KeyN)
		return mb.ForEach(func(_, v []byte) error {
			var m chat.Message
			if err := json.Unmarshal(v, &m); err != nil {
				return fmt.Errorf("damaged message in session %q: %w", key, err)
			}
			out = append(out, m)
			return nil
		})
	})
	db.cache.finishLoad(key, out, err == nil)
	if err != nil {
		return nil, fmt.Errorf("store: history of %q: %w", key, err)
	}
	return out, nil
}

// Reset deletes session key's history (the /new command).
func (db *DB) Reset(key string) error {
	var existed bool
	err := db.update(func(tx *bolt.Tx) error {
		sb := tx.Bucket([]byte(BucketSessions))
		if existed = sb.Bucket([]byte(key)) != nil; !existed {
			return nil
		}
		return sb.DeleteBucket([]byte(key))
	})
	if err != nil {
		return fmt.Errorf("store: reset session %q: %w", key, err)
	}
	if existed {
		db.sessions.Add(-1)
	}
	db.cache.drop(key)
	return nil
}

// Session returns the summary of session key (zero Count when absent).
func (db *DB) Session(key string) (SessionInfo, error) {
	out := SessionInfo{Key: key}
	err := db.sessionsView(func(tx *bolt.Tx) error {
		sess := tx.Bucket([]byte(BucketSessions)).Bucket([]byte(key))
		if sess == nil {
			return nil
		}
		return decodeInfo(sess, &out)
	})
	return out, err
}

func decodeInfo(sess *bolt.Bucket, out *SessionInfo) error {
	v := sess.Get(keyInfo)
	if v == nil {
		return nil
	}
	var info infoRecord
	if err := info.unmarshal(v); err != nil {
		return fmt.Errorf("store: session %q info: %w", out.Key, err)
	}
	out.Count, out.Created, out.Updated, out.Usage = info.Count, info.Created, info.Updated, info.Usage
	out.Channel, out.ChatID = info.Channel, info.ChatID
	return nil
}

// Sessions lists every session, most recently updated first.
func (db *DB) Sessions() ([]SessionInfo, error) {
	var out []SessionInfo
	err := db.sessionsView(func(tx *bolt.Tx) error {
		sb := tx.Bucket([]byte(BucketSessions))
		return sb.ForEachBucket(func(k []byte) error {
			s := SessionInfo{Key: string(k)}
			if err := decodeInfo(sb.Bucket(k), &s); err != nil {
				return err
			}
			out = append(out, s)
			return nil
		})
	})
	sort.SliceStable(out, func(i, j int) bool { return out[i].Updated.After(out[j].Updated) })
	return out, err
}

// TotalUsage is the token count over all sessions since the file was made.
func (db *DB) TotalUsage() (chat.Usage, error) {
	var u chat.Usage
	err := db.sessionsView(func(tx *bolt.Tx) error {
		u = decodeUsage(tx.Bucket([]byte(BucketMeta)).Get(keyUsage))
		return nil
	})
	return u, err
}

func encodeUsage(u chat.Usage) []byte {
	b := make([]byte, 24)
	binary.BigEndian.PutUint64(b, uint64(u.PromptTokens))
	binary.BigEndian.PutUint64(b[8:], uint64(u.CompletionTokens))
	binary.BigEndian.PutUint64(b[16:], uint64(u.TotalTokens))
	return b
}

func decodeUsage(b []byte) chat.Usage {
	if len(b) != 24 {
		return chat.Usage{}
	}
	return chat.Usage{PromptTokens: int64(binary.BigEndian.Uint64(b)), CompletionTokens: int64(binary.BigEndian.Uint64(b[8:])), TotalTokens: int64(binary.BigEndian.Uint64(b[16:]))}
}

// sessionsView reads sessions' records from bbolt after putting the
// journal into it; a read served a moment stale beats an error when that
// commit fails.
func (db *DB) sessionsView(fn func(*bolt.Tx) error) error {
	_ = db.settle()
	return db.bolt.View(fn)
}
