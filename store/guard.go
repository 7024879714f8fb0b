package store

import (
	"fmt"
	"runtime/debug"
	"time"

	bolt "go.etcd.io/bbolt"
)

// guardedBolt is the bbolt handle every store method goes through: a panic
// raised while a transaction reads a damaged page, or a memory fault on a
// page the mapping no longer covers (debug.SetPanicOnFault turns it into a
// panic, for this goroutine only), becomes an ErrDamaged error instead of
// ending the process. bbolt rolls the transaction back on the way out.
// Open checks the file so this should not happen; it guards against damage
// that appears while running (a failing card) and against what the checks
// do not cover. Panics in goroutines bbolt starts itself (its consistency
// check, its freelist rebuild) cannot be caught here: a damaged file then
// still ends the process, and the next start finds the damage because the
// marker left behind asks for the full check.
type guardedBolt struct {
	*bolt.DB
	owner *DB
}

func (g *guardedBolt) View(fn func(*bolt.Tx) error) (err error) {
	old := debug.SetPanicOnFault(true)
	defer func() {
		debug.SetPanicOnFault(old)
		if r := recover(); r != nil {
			err = g.owner.noteDamage(r)
		}
	}()
	return g.DB.View(fn)
}

func (g *guardedBolt) Update(fn func(*bolt.Tx) error) (err error) {
	old := debug.SetPanicOnFault(true)
	defer func() {
		debug.SetPanicOnFault(old)
		if r := recover(); r != nil {
			err = g.owner.noteDamage(r)
		}
	}()
	return g.DB.Update(fn)
}

type damageNote struct {
	at  time.Time
	err error
}

// noteDamage records the first damage met while running and returns the
// error for the caller.
func (db *DB) noteDamage(r any) error {
	err := fmt.Errorf("%w while running: %v; restart perch: it checks the file at start, sets a damaged one aside and starts afresh", ErrDamaged, r)
	db.damage.CompareAndSwap(nil, &damageNote{at: time.Now(), err: err})
	return err
}

// Damaged returns the first damage met while running, or nil. Ping reports
// it too, so readiness fails until a restart has dealt with the file.
func (db *DB) Damaged() error {
	if n := db.damage.Load(); n != nil {
		return n.err
	}
	return nil
}
