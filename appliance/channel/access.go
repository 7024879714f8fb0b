package channel

import (
	"crypto/rand"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/perchhq/perch/appliance/api"
	"github.com/perchhq/perch/store"
)

// Pairing lets the owner admit a new sender without editing the config:
// an unknown sender on a channel with allow_from set gets one short answer
// with a code (at most once a day), and `perch channels approve CODE` (or
// the page) adds the sender's id to channels.<p>.allow_from.

// PairingTTL is how long a pairing code stays valid, and how long a sender
// who got one waits before another answer.
const PairingTTL = 24 * time.Hour

// maxPairings bounds the codes waiting at once: strangers cannot fill the
// store by writing to the bot from many accounts.
const maxPairings = 64

// Pairing is a sender waiting for the owner's approval.
type Pairing = api.Pairing

// Approval is what approving a code did.
type Approval = api.Approval

// ErrNoPairing is returned for a code that does not exist or expired.
var ErrNoPairing = errors.New("no such pairing code (codes expire after 24 hours; ask the sender to write to the bot again for a new one)")

// codeAlphabet leaves out letters and digits people confuse (0/O, 1/I/L).
const codeAlphabet = "23456789ABCDEFGHJKMNPQRSTUVWXYZ"

func newCode() string {
	b := make([]byte, 6)
	rand.Read(b) // never fails on Linux
	for i := range b {
		b[i] = codeAlphabet[int(b[i])%len(codeAlphabet)]
	}
	return string(b)
}

func codeKey(code string) string { return "code/" + code }

func senderKey(channel, id string) string { return "sender/" + channel + "/" + id }

type senderMark struct {
	Answered time.Time `json:"answered"`
	Code     string    `json:"code"`
}

// NormalizeCode upper-cases a code as typed and drops spaces and dashes.
func NormalizeCode(code string) string {
	return strings.ToUpper(strings.NewReplacer(" ", "", "-", "").Replace(strings.TrimSpace(code)))
}

// RequestPairing returns a fresh pairing code for the sender, or "" when the sender
// got an answer less than a day ago (or too many codes wait).
func RequestPairing(db *store.DB, p Pairing, now time.Time) (string, error) {
	var mark senderMark
	err := db.Get(store.BucketPairing, senderKey(p.Channel, p.SenderID), &mark)
	if err == nil && now.Sub(mark.Answered) < PairingTTL {
		return "", nil
	}
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return "", err
	}
	waiting, err := prunePairings(db, now)
	if err != nil {
		return "", err
	}
	if waiting >= maxPairings {
		return "", fmt.Errorf("channels: %d pairing codes already wait for approval; new senders get none until they expire", waiting)
	}
	p.Code, p.Created = newCode(), now
	if err := db.Put(store.BucketPairing, codeKey(p.Code), p); err != nil {
		return "", err
	}
	if err := db.Put(store.BucketPairing, senderKey(p.Channel, p.SenderID), senderMark{Answered: now, Code: p.Code}); err != nil {
		return "", err
	}
	return p.Code, nil
}

// prunePairings deletes expired records and counts the codes left.
func prunePairings(db *store.DB, now time.Time) (int, error) {
	var stale []string
	n := 0
	err := db.List(store.BucketPairing, func(key string, data []byte) error {
		var rec struct {
			Created  time.Time `json:"created"`
			Answered time.Time `json:"answered"`
		}
		if err := jsonUnmarshal(data, &rec); err != nil {
			stale = append(stale, key)
			return nil
		}
		t := rec.Created
		if strings.HasPrefix(key, "sender/") {
			t = rec.Answered
		}
		if now.Sub(t) >= PairingTTL {
			stale = append(stale, key)
		} else if strings.HasPrefix(key, "code/") {
			n++
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	for _, k := range stale {
		if err := db.Delete(store.BucketPairing, k); err != nil {
			return 0, err
		}
	}
	return n, nil
}

// Pairings lists the codes waiting for approval, oldest first.
func Pairings(db *store.DB, now time.Time) ([]Pairing, error) {
	var out []Pairing
	err := db.List(store.BucketPairing, func(key string, data []byte) error {
		if !strings.HasPrefix(key, "code/") {
			return nil
		}
		var p Pairing
		if err := jsonUnmarshal(data, &p); err == nil && now.Sub(p.Created) < PairingTTL {
			out = append(out, p)
		}
		return nil
	})
	sortPairings(out)
	return out, err
}

// Approve admits the sender of code: save adds the sender's id to
// channels.<p>.allow_from in the config file, then the code is spent. It
// works on the store directly, so the CLI can approve while no gateway
// runs; a running gateway's Hub.Approve also updates the live list.
func Approve(db *store.DB, code string, now time.Time, save func(channel, id string) error) (Approval, error) {
	code = NormalizeCode(code)
	if code == "" {
		return Approval{}, errors.New("channels: the pairing code is empty; give the code the bot sent the new sender")
	}
	var p Pairing
	if err := db.Get(store.BucketPairing, codeKey(code), &p); err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return Approval{}, fmt.Errorf("%w: %s", ErrNoPairing, code)
		}
		return Approval{}, err
	}
	if now.Sub(p.Created) >= PairingTTL {
		db.Delete(store.BucketPairing, codeKey(code))
		return Approval{}, fmt.Errorf("%w: %s", ErrNoPairing, code)
	}
	if strings.TrimSpace(p.SenderID) == "" {
		// Codes were once given to messages without a sender; approving
		// one wrote "" into allow_from, which the next start refuses.
		db.Delete(store.BucketPairing, codeKey(code))
		return Approval{}, fmt.Errorf("channels: code %s was given to a message with no sender id, so there is nobody to approve; the code is removed", code)
	}
	if err := save(p.Channel, p.SenderID); err != nil {
		return Approval{}, err
	}
	if err := db.Delete(store.BucketPairing, codeKey(code)); err != nil {
		return Approval{}, err
	}
	db.Delete(store.BucketPairing, senderKey(p.Channel, p.SenderID))
	return Approval{Pairing: p, Key: "channels." + p.Channel + ".allow_from"}, nil
}

// allowList is a channel's allow_from, updated live when a sender is
// approved.
type allowList struct {
	mu      sync.RWMutex
	entries []string
	isID    func(string) bool
}

func newAllowList(entries []string, isID func(string) bool) *allowList {
	if isID == nil {
		isID = DigitsID
	}
	return &allowList{entries: append([]string(nil), entries...), isID: isID}
}

// empty reports whether the channel admits everyone.
func (a *allowList) empty() bool {
	a.mu.RLock()
	defer a.mu.RUnlock()
	return len(a.entries) == 0
}

// allows reports whether the sender's id or username is listed. Usernames
// match without their @ and regardless of case, as platforms treat them;
// an entry shaped like an id matches the id alone.
func (a *allowList) allows(id, username string) bool {
	a.mu.RLock()
	defer a.mu.RUnlock()
	user := strings.TrimPrefix(username, "@")
	for _, e := range a.entries {
		if id != "" && e == id {
			return true
		}
		name, at := strings.CutPrefix(e, "@")
		if user == "" || !at && a.isID(e) {
			continue
		}
		if strings.EqualFold(name, user) {
			return true
		}
	}
	return false
}

// hasNames reports whether some entry can match a username.
func (a *allowList) hasNames() bool {
	a.mu.RLock()
	defer a.mu.RUnlock()
	for _, e := range a.entries {
		if strings.HasPrefix(e, "@") || !a.isID(e) {
			return true
		}
	}
	return false
}

func (a *allowList) add(id string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, e := range a.entries {
		if e == id {
			return
		}
	}
	a.entries = append(a.entries, id)
}
