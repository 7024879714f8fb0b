package sandbox

import (
	"context"
	"testing"
)

// BenchmarkRunTrue measures exec → result for the smallest command, which
// is the sandbox's own cost: launcher, confinement, temp dir, reaping.
func BenchmarkRunTrue(b *testing.B) {
	for _, user := range []string{"", "root"} {
		b.Run("user="+user, func(b *testing.B) {
			f := newFixture(b)
			r, err := New(Options{Workspace: f.ws, User: user, Log: quietLog()})
			if err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, err := r.Run(context.Background(), Command{Line: "true"}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
