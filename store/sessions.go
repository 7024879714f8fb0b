package store

import (
	"encoding/json"
	"fmt"
	"sort"
	"time"

	bolt "go.etcd.io/bbolt"
)

// Message is one entry of a conversation, in the chat-completions shape.
type Message struct {
	Role       string     `json:"role"` // system, user, assistant, tool
	Content    string     `json:"content,omitempty"`
	ToolCalls  []ToolCall `json:"tool_calls,omitempty"`
	ToolCallID string     `json:"tool_call_id,omitempty"`
	Name       string     `json:"name,omitempty"`
	// Time is Unix milliseconds; zero when unknown.
	Time int64 `json:"t,omitempty"`
}

// ToolCall is a model's request to run a tool.
type ToolCall struct {
	ID        string `json:"id"`
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

// Usage counts tokens reported by the provider.
type Usage struct {
	PromptTokens     int64 `json:"prompt_tokens"`
	CompletionTokens int64 `json:"completion_tokens"`
	TotalTokens      int64 `json:"total_tokens"`
}

// Add returns u + o.
func (u Usage) Add(o Usage) Usage {
	return Usage{u.PromptTokens + o.PromptTokens, u.CompletionTokens + o.CompletionTokens, u.TotalTokens + o.TotalTokens}
}

// SessionInfo summarises a session.
type SessionInfo struct {
	Key      string    `json:"key"`
	Count    int       `json:"message_count"`
	Created  time.Time `json:"created"`
	Updated  time.Time `json:"updated"`
	Usage    Usage     `json:"usage"`
	Channel  string    `json:"channel,omitempty"`
	ChatID   string    `json:"chat_id,omitempty"`
	External bool      `json:"-"`
}

type infoRecord struct {
	Count   int       `json:"count"`
	Created time.Time `json:"created"`
	Updated time.Time `json:"updated"`
	Usage   Usage     `json:"usage"`
	Channel string    `json:"channel,omitempty"`
	ChatID  string    `json:"chat_id,omitempty"`
}

// Append adds msgs to session key in one durable transaction, adds usage to
// the session's and the global totals, and trims the session to its last
// limit messages (never fewer than 100), dropping leading messages that are
// not from the user so the history never starts with an orphan tool result.
// route, when non-empty, records the (channel, chat) the session talks on.
func (db *DB) Append(key string, msgs []Message, usage Usage, limit int, route ...string) error {
	if limit < 100 {
		limit = 100
	}
	encoded := make([][]byte, len(msgs))
	for i, m := range msgs {
		b, err := json.Marshal(m)
		if err != nil {
			return fmt.Errorf("store: encode message: %w", err)
		}
		encoded[i] = b
	}
	now := time.Now().UTC()
	var trimmed int
	err := db.update(func(tx *bolt.Tx) error {
		trimmed = 0
		sess, err := tx.Bucket([]byte(BucketSessions)).CreateBucketIfNotExists([]byte(key))
		if err != nil {
			return err
		}
		mb, err := sess.CreateBucketIfNotExists(keyMsgs)
		if err != nil {
			return err
		}
		var info infoRecord
		if v := sess.Get(keyInfo); v != nil {
			if err := json.Unmarshal(v, &info); err != nil {
				return fmt.Errorf("session %q info: %w", key, err)
			}
		} else {
			info.Created = now
		}
		for _, data := range encoded {
			seq, err := mb.NextSequence()
			if err != nil {
				return err
			}
			if err := mb.Put(u64(seq), data); err != nil {
				return err
			}
		}
		info.Count += len(encoded)
		if info.Count > limit {
			trimmed, err = trim(mb, info.Count-limit)
			if err != nil {
				return err
			}
			info.Count -= trimmed
		}
		info.Updated = now
		info.Usage = info.Usage.Add(usage)
		if len(route) == 2 {
			info.Channel, info.ChatID = route[0], route[1]
		}
		data, err := json.Marshal(info)
		if err != nil {
			return err
		}
		if err := sess.Put(keyInfo, data); err != nil {
			return err
		}
		if usage != (Usage{}) {
			meta := tx.Bucket([]byte(BucketMeta))
			var total Usage
			if v := meta.Get(keyUsage); v != nil {
				_ = json.Unmarshal(v, &total) // a damaged total restarts from zero
			}
			data, _ := json.Marshal(total.Add(usage))
			if err := meta.Put(keyUsage, data); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("store: append to session %q: %w", key, err)
	}
	db.cache.appended(key, msgs, trimmed)
	return nil
}

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

// History returns the stored messages of session key, oldest first. The
// slice is the caller's.
func (db *DB) History(key string) ([]Message, error) {
	if msgs, ok := db.cache.get(key); ok {
		return msgs, nil
	}
	var out []Message
	err := db.bolt.View(func(tx *bolt.Tx) error {
		sess := tx.Bucket([]byte(BucketSessions)).Bucket([]byte(key))
		if sess == nil {
			return nil
		}
		mb := sess.Bucket(keyMsgs)
		if mb == nil {
			return nil
		}
		out = make([]Message, 0, mb.Stats().KeyN)
		return mb.ForEach(func(_, v []byte) error {
			var m Message
			if err := json.Unmarshal(v, &m); err != nil {
				return fmt.Errorf("damaged message in session %q: %w", key, err)
			}
			out = append(out, m)
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("store: history of %q: %w", key, err)
	}
	db.cache.put(key, out)
	return out, nil
}

// Reset deletes session key's history (the /new command).
func (db *DB) Reset(key string) error {
	err := db.update(func(tx *bolt.Tx) error {
		sb := tx.Bucket([]byte(BucketSessions))
		if sb.Bucket([]byte(key)) == nil {
			return nil
		}
		return sb.DeleteBucket([]byte(key))
	})
	if err != nil {
		return fmt.Errorf("store: reset session %q: %w", key, err)
	}
	db.cache.drop(key)
	return nil
}

// Session returns the summary of session key (zero Count when absent).
func (db *DB) Session(key string) (SessionInfo, error) {
	out := SessionInfo{Key: key}
	err := db.bolt.View(func(tx *bolt.Tx) error {
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
	if err := json.Unmarshal(v, &info); err != nil {
		return fmt.Errorf("store: session %q info: %w", out.Key, err)
	}
	out.Count, out.Created, out.Updated, out.Usage = info.Count, info.Created, info.Updated, info.Usage
	out.Channel, out.ChatID = info.Channel, info.ChatID
	return nil
}

// Sessions lists every session, most recently updated first.
func (db *DB) Sessions() ([]SessionInfo, error) {
	var out []SessionInfo
	err := db.bolt.View(func(tx *bolt.Tx) error {
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
func (db *DB) TotalUsage() (Usage, error) {
	var u Usage
	err := db.bolt.View(func(tx *bolt.Tx) error {
		if v := tx.Bucket([]byte(BucketMeta)).Get(keyUsage); v != nil {
			return json.Unmarshal(v, &u)
		}
		return nil
	})
	return u, err
}
