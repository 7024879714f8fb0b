package store

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	bolt "go.etcd.io/bbolt"
)

// keyedLeaves writes a bucket of 3,000 keys (several leaf pages under a
// branch) and returns the file and its leaf pages holding those keys, in
// key order, each as its page offset and element count.
func keyedLeaves(t *testing.T) (data []byte, pageSize int, leaves []int64) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "keys.db")
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucket([]byte("b"))
		if err != nil {
			return err
		}
		for i := range 3000 {
			if err := b.Put(fmt.Appendf(nil, "k%05d", i), bytes.Repeat([]byte("v"), 60)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	pageSize = db.Info().PageSize
	db.Close()
	if data, err = os.ReadFile(path); err != nil {
		t.Fatal(err)
	}
	// Pages freed by the splits while writing keep their old content;
	// only the pages the newest tree reaches count.
	metas, _ := readMetas(&fileBytes{data: data}, int64(len(data)))
	w := newWalker(&fileBytes{data: data}, int64(len(data)), metas[0], &countVisitor{})
	w.run()
	first := map[int64]string{}
	for off := int64(2 * pageSize); off+int64(pageSize) <= int64(len(data)); off += int64(pageSize) {
		p := data[off : off+int64(pageSize)]
		if ne.Uint16(p[8:]) != flagLeaf || ne.Uint16(p[10:]) < 3 {
			continue
		}
		_, k, _, _, err := elemAt(p, 0, true)
		if err != nil || !strings.HasPrefix(string(k), "k") {
			continue
		}
		if id := off / int64(pageSize); w.seen[id/64]&(1<<(id%64)) == 0 {
			continue
		}
		first[off] = string(k)
		leaves = append(leaves, off)
	}
	sort.Slice(leaves, func(i, j int) bool { return first[leaves[i]] < first[leaves[j]] })
	if len(leaves) < 3 {
		t.Fatalf("%d leaf pages; the test needs a leaf with neighbours on both sides", len(leaves))
	}
	return data, pageSize, leaves
}

// TestWalkFindsKeysOutOfPlace: a key out of order in the middle of a page,
// a page's last key past its parent's next separator and its first key
// before its own separator are each damage the walk at open reports (bbolt's
// searches would miss those records), though the walk compares a key with
// its parent's bounds only at either end of a page.
func TestWalkFindsKeysOutOfPlace(t *testing.T) {
	data, pageSize, leaves := keyedLeaves(t)
	size := int64(len(data))
	if c := verifyFile(&fileBytes{data: data}, size, false, true); !c.sound() {
		t.Fatalf("the intact file: %v", c.problems)
	}
	mid := leaves[len(leaves)/2]
	count := int(ne.Uint16(data[mid+10:]))
	for _, tc := range []struct {
		name  string
		elem  int
		key   string
		wants string
	}{
		{"a key in the middle below the one before it", count / 2, "k00000", "keys out of order"},
		{"the last key past the next page's first", count - 1, "k99999", "outside its parent's range"},
		{"the first key before the page's own separator", 0, "k00000", "outside its parent's range"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bad := bytes.Clone(data)
			p := bad[mid : mid+int64(pageSize)]
			_, k, _, _, err := elemAt(p, tc.elem, true)
			if err != nil || len(k) != len(tc.key) {
				t.Fatalf("element %d: key %q, %v", tc.elem, k, err)
			}
			copy(k, tc.key)
			for _, quick := range []bool{true, false} {
				c := verifyFile(&fileBytes{data: bad}, size, false, quick)
				if c.sound() || !strings.Contains(strings.Join(c.problems, "\n"), tc.wants) {
					t.Errorf("quick=%v: problems %q; want one saying %q", quick, c.problems, tc.wants)
				}
			}
		})
	}
}
