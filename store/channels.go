package store

import (
	"encoding/binary"
	"fmt"
	"strings"

	bolt "go.etcd.io/bbolt"
)

// Buckets of the chat channels. BucketChannels holds each platform's own
// small state (Telegram's offset, LINE's push count) through Put and Get,
// and its bounded key sets through Remember; BucketPairing the pending
// pairing codes.
const (
	BucketChannels = "channels"
	BucketPairing  = "pairing"
	bucketInbox    = "inbox"
	bucketSeen     = "seen" // one nested bucket per channel: event id → sequence
	bucketSeenSeq  = "seen_order"
)

// Admit records that channel received the event eventID and, unless it was
// received before, stores the inbox entry entry(id) under a new id — both in
// one transaction, so a message is either new and durable or a redelivery,
// never half of each. Only the newest keep event ids per channel are
// remembered. An empty eventID skips the duplicate check.
func (db *DB) Admit(channel, eventID string, keep int, entry func(id uint64) ([]byte, error)) (id uint64, dup bool, err error) {
	err = db.update(func(tx *bolt.Tx) error {
		id, dup = 0, false
		if eventID != "" {
			seen, order, err := seenBuckets(tx, channel)
			if err != nil {
				return err
			}
			if seen.Get([]byte(eventID)) != nil {
				dup = true
				return nil
			}
			if err := addBounded(seen, order, []byte(eventID), keep); err != nil {
				return err
			}
		}
		inbox, err := tx.CreateBucketIfNotExists([]byte(bucketInbox))
		if err != nil {
			return err
		}
		next, err := inbox.NextSequence()
		if err != nil {
			return err
		}
		data, err := entry(next)
		if err != nil {
			return err
		}
		id = next
		return inbox.Put(u64(next), data)
	})
	if err != nil {
		return 0, false, fmt.Errorf("store: admit %s event: %w", channel, err)
	}
	return id, dup, nil
}

// addBounded adds key to the set seen (key → sequence), with its
// sequence in order (sequence → key), and forgets the oldest keys beyond
// keep (0: none). key must not be in seen.
func addBounded(seen, order *bolt.Bucket, key []byte, keep int) error {
	seq, err := order.NextSequence()
	if err != nil {
		return err
	}
	if err := seen.Put(key, u64(seq)); err != nil {
		return err
	}
	if err := order.Put(u64(seq), key); err != nil {
		return err
	}
	if keep <= 0 {
		return nil
	}
	// Sequences are dense and only the oldest are deleted, so the count
	// is seq-first+1.
	c := order.Cursor()
	for k, v := c.First(); k != nil && seq-binary.BigEndian.Uint64(k)+1 > uint64(keep); k, v = c.First() {
		if err := seen.Delete(v); err != nil {
			return err
		}
		if err := c.Delete(); err != nil {
			return err
		}
	}
	return nil
}

// Remember adds keys to the set name of BucketChannels (a nested bucket,
// "slack/threads"), which keeps only the newest keep keys. A key already
// in the set stays where it is. Channels keep there what must outlive a
// restart and a session's reset but need not be kept for ever: the ids of
// messages the bot sent, the threads it answered in.
func (db *DB) Remember(name string, keep int, keys ...string) error {
	err := db.update(func(tx *bolt.Tx) error {
		root, err := tx.CreateBucketIfNotExists([]byte(BucketChannels))
		if err != nil {
			return err
		}
		set, err := root.CreateBucketIfNotExists([]byte(name))
		if err != nil {
			return err
		}
		held, err := set.CreateBucketIfNotExists(setKeys)
		if err != nil {
			return err
		}
		order, err := set.CreateBucketIfNotExists(setOrder)
		if err != nil {
			return err
		}
		for _, k := range keys {
			if k == "" || held.Get([]byte(k)) != nil {
				continue
			}
			if err := addBounded(held, order, []byte(k), keep); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("store: remember %s in %s: %w", strings.Join(keys, ", "), name, err)
	}
	return nil
}

// Remembered reports whether key is in the set name (see Remember).
func (db *DB) Remembered(name, key string) (bool, error) {
	found := false
	err := db.bolt.View(func(tx *bolt.Tx) error {
		root := tx.Bucket([]byte(BucketChannels))
		if root == nil {
			return nil
		}
		set := root.Bucket([]byte(name))
		if set == nil {
			return nil
		}
		keys := set.Bucket(setKeys)
		found = keys != nil && keys.Get([]byte(key)) != nil
		return nil
	})
	return found, err
}

var setKeys, setOrder = []byte("keys"), []byte("order")

// Seen reports whether channel already admitted eventID.
func (db *DB) Seen(channel, eventID string) (bool, error) {
	found := false
	err := db.bolt.View(func(tx *bolt.Tx) error {
		root := tx.Bucket([]byte(bucketSeen))
		if root == nil {
			return nil
		}
		b := root.Bucket([]byte(channel))
		found = b != nil && b.Get([]byte(eventID)) != nil
		return nil
	})
	return found, err
}

func seenBuckets(tx *bolt.Tx, channel string) (seen, order *bolt.Bucket, err error) {
	for i, name := range []string{bucketSeen, bucketSeenSeq} {
		root, err := tx.CreateBucketIfNotExists([]byte(name))
		if err != nil {
			return nil, nil, err
		}
		b, err := root.CreateBucketIfNotExists([]byte(channel))
		if err != nil {
			return nil, nil, err
		}
		if i == 0 {
			seen = b
		} else {
			order = b
		}
	}
	return seen, order, nil
}

// InboxPut replaces the inbox entry id (an entry whose reply is waiting for
// the platform to come back).
func (db *DB) InboxPut(id uint64, data []byte) error {
	data = append([]byte(nil), data...)
	return db.update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucketIfNotExists([]byte(bucketInbox))
		if err != nil {
			return err
		}
		return b.Put(u64(id), data)
	})
}

// InboxDelete removes the inbox entry id; an absent one is not an error.
func (db *DB) InboxDelete(id uint64) error {
	return db.update(func(tx *bolt.Tx) error {
		b := tx.Bucket([]byte(bucketInbox))
		if b == nil {
			return nil
		}
		return b.Delete(u64(id))
	})
}

// InboxGet calls fn with the data of inbox entry id, if there is one, and
// reports whether there was; data is valid only during the call.
func (db *DB) InboxGet(id uint64, fn func(data []byte) error) (found bool, err error) {
	err = db.bolt.View(func(tx *bolt.Tx) error {
		b := tx.Bucket([]byte(bucketInbox))
		if b == nil {
			return nil
		}
		v := b.Get(u64(id))
		if v == nil {
			return nil
		}
		found = true
		return fn(v)
	})
	return found, err
}

// InboxList calls fn for every inbox entry, oldest first. data is valid
// only during the call.
func (db *DB) InboxList(fn func(id uint64, data []byte) error) error {
	return db.bolt.View(func(tx *bolt.Tx) error {
		b := tx.Bucket([]byte(bucketInbox))
		if b == nil {
			return nil
		}
		return b.ForEach(func(k, v []byte) error {
			if len(k) != 8 {
				return nil
			}
			return fn(binary.BigEndian.Uint64(k), v)
		})
	})
}
