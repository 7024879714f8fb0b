package channel

// Recent is a bounded set of keys (message ids, threads), the oldest
// dropped first: the in-memory front of what a platform remembers in the
// store. Not safe for concurrent use; callers hold their own lock.
type Recent struct {
	max   int
	order []string
	set   map[string]bool
}

// NewRecent returns a set holding at most max keys.
func NewRecent(max int) *Recent { return &Recent{max: max, set: map[string]bool{}} }

// Add puts k in the set; an empty key is ignored.
func (r *Recent) Add(k string) {
	if k == "" || r.set[k] {
		return
	}
	r.set[k] = true
	r.order = append(r.order, k)
	if len(r.order) > r.max {
		delete(r.set, r.order[0])
		r.order = r.order[1:]
	}
}

// Has reports whether k is in the set.
func (r *Recent) Has(k string) bool { return r.set[k] }
