package channel

import "testing"

func TestRecentDropsTheOldest(t *testing.T) {
	r := NewRecent(2)
	r.Add("a")
	r.Add("b")
	r.Add("a") // already held: does not count again
	r.Add("")
	r.Add("c")
	if r.Has("a") || !r.Has("b") || !r.Has("c") || r.Has("") {
		t.Errorf("after a, b, c in a set of 2: a=%v b=%v c=%v", r.Has("a"), r.Has("b"), r.Has("c"))
	}
}
