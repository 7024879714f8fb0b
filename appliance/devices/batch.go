package devices

import (
	"fmt"
	"strings"
	"time"

	"github.com/perchhq/perch/drivers/usb"
)

// change is one device coming or going.
type change struct {
	connected bool
	// offline marks a change found at start-up by comparing with the list
	// saved at the last stop: it happened while Perch was not running.
	offline bool
	dev     usb.Device
}

func (c change) String() string {
	verb := "disconnected"
	if c.connected {
		verb = "connected"
	}
	if c.offline {
		verb += " while Perch was stopped"
	}
	return verb + ": " + c.dev.String()
}

// maxLines caps one notification; the rest is counted, never silently lost.
const maxLines = 20

// batch gathers the changes of a burst (a hub brings its devices along)
// into one notification: it is due once no change came for quiet, or maxWait
// after its first change, whichever is sooner.
type batch struct {
	quiet, maxWait time.Duration

	changes []change
	first   time.Time
	last    time.Time
}

func (b *batch) add(c change, now time.Time) {
	if len(b.changes) == 0 {
		b.first = now
	}
	b.last = now
	b.changes = append(b.changes, c)
}

func (b *batch) empty() bool { return len(b.changes) == 0 }

// due returns when the batch should be sent.
func (b *batch) due() time.Time {
	t := b.last.Add(b.quiet)
	if limit := b.first.Add(b.maxWait); limit.Before(t) {
		return limit
	}
	return t
}

// take empties the batch and returns its changes.
func (b *batch) take() []change {
	c := b.changes
	b.changes = nil
	return c
}

// putBack returns changes whose notification failed to the front of the
// batch, so they are sent, in order, with whatever came since.
func (b *batch) putBack(cs []change, now time.Time) {
	if len(cs) == 0 {
		return
	}
	b.changes = append(cs, b.changes...)
	b.first, b.last = now, now
}

// message renders changes as the notification text.
func message(cs []change) string {
	if len(cs) == 1 {
		return "USB device " + cs[0].String()
	}
	lines := []string{fmt.Sprintf("USB devices changed (%d):", len(cs))}
	for i, c := range cs {
		if i == maxLines {
			lines = append(lines, fmt.Sprintf("… and %d more; /devices lists what is connected now", len(cs)-maxLines))
			break
		}
		mark := "-"
		if c.connected {
			mark = "+"
		}
		lines = append(lines, mark+" "+c.String())
	}
	return strings.Join(lines, "\n")
}
