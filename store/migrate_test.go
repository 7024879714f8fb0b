package store_test

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/perchhq/perch/appliance/chat"
	"github.com/perchhq/perch/store"
	"github.com/perchhq/perch/store/storetest"
)

// copyFixture puts testdata/name in a temp dir as perch.db.
func copyFixture(t *testing.T, name string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "perch.db")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func schemaOf(t *testing.T, path string) uint64 {
	t.Helper()
	b, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	var v uint64
	b.View(func(tx *bolt.Tx) error {
		v = binary.BigEndian.Uint64(tx.Bucket([]byte("meta")).Get([]byte("schema")))
		return nil
	})
	return v
}

// TestMigrateFromV01: a database written by perch v0.1 (schema 1, the
// committed fixture) opens with this perch, is migrated to the current
// schema, and keeps every session, message, usage record, cron job and
// device record.
func TestMigrateFromV01(t *testing.T) {
	path := copyFixture(t, "v0.1.db")
	if v := schemaOf(t, path); v != 1 {
		t.Fatalf("fixture has schema %d, want 1", v)
	}
	db, err := store.Open(path, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	check := func(db *store.DB) {
		t.Helper()
		if db.Recovered() != nil {
			t.Fatalf("the v0.1 file was taken for damaged: %+v", db.Recovered())
		}
		ss, err := db.Sessions()
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]store.SessionInfo{}
		for _, s := range ss {
			got[s.Key] = s
		}
		if len(got) != 3 || db.SessionCount() != 3 {
			t.Fatalf("sessions = %v (count %d)", ss, db.SessionCount())
		}
		tg := got["telegram:12345"]
		if tg.Count != 4 || tg.Channel != "telegram" || tg.ChatID != "12345" || tg.Usage.TotalTokens != 876 || tg.Usage.PromptTokens != 812 {
			t.Errorf("telegram session = %+v", tg)
		}
		h, err := db.History("telegram:12345")
		if err != nil || len(h) != 4 {
			t.Fatalf("history = %v, %v", h, err)
		}
		if h[1].ToolCalls[0].Arguments != `{"action":"read","name":"greenhouse"}` || h[2].ToolCallID != "call_1" ||
			h[3].Content != "It is 18.4 °C with 71 % humidity — snug. 🌱" || h[0].Time != 1763880000000 {
			t.Errorf("messages changed: %+v", h)
		}
		cli, _ := db.History("cli:default")
		if n := got["cli:default"].Count; n != len(cli) || n < 68 || n > 100 || cli[0].Role != "user" ||
			cli[len(cli)-1].Content != "answer 69 "+strings.Repeat("·", 69) {
			t.Errorf("trimmed session: %d messages (info %d), first %+v", len(cli), n, cli[0])
		}
		if got["cli:default"].Usage.TotalTokens != 70*15 {
			t.Errorf("cli usage = %+v", got["cli:default"].Usage)
		}
		big, _ := db.History("rest:big")
		if len(big) != 2 || len(big[0].Content) != 600*len("long line of text\n") {
			t.Errorf("big session: %d messages", len(big))
		}
		if u, _ := db.TotalUsage(); u.TotalTokens != 876+70*15 || u.PromptTokens != 812+700 {
			t.Errorf("total usage = %+v", u)
		}
		var jobs []map[string]any
		db.List(store.BucketCron, func(k string, v []byte) error {
			var j map[string]any
			if err := json.Unmarshal(v, &j); err != nil {
				t.Errorf("job %s: %v", k, err)
			}
			jobs = append(jobs, j)
			return nil
		})
		msgs := map[string]bool{}
		for _, j := range jobs {
			msgs[j["message"].(string)] = true
		}
		if len(jobs) != 3 || !msgs["water the plants"] || !msgs["weekly report"] || !msgs["remind me"] {
			t.Errorf("cron jobs = %v", jobs)
		}
		dev, _ := db.LoadDevices()
		if !bytes.Contains(dev, []byte(`"product":"FT232R USB UART"`)) || !bytes.Contains(dev, []byte(`"version":1`)) {
			t.Errorf("device record = %s", dev)
		}
	}
	check(db)
	// The migrated file takes new kinds of records and new turns.
	if err := db.AppendReadings(store.Reading{Sensor: "greenhouse", Quantity: "temperature", Unit: "°C", Time: time.Now(), Value: 18.4}); err != nil {
		t.Fatal(err)
	}
	if err := db.Append("telegram:12345", []chat.Message{user("and now?")}, chat.Usage{TotalTokens: 1}, 200); err != nil {
		t.Fatal(err)
	}
	db.Close()
	if v := schemaOf(t, path); v != store.SchemaVersion {
		t.Fatalf("schema after open = %d, want %d", v, store.SchemaVersion)
	}
	storetest.CheckFile(t, path)
	db, err = store.Open(path, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	series, err := db.SensorHistory(store.SensorQuery{Sensor: "greenhouse", Since: time.Now().Add(-time.Hour)})
	if err != nil || len(series) != 1 || len(series[0].Points) != 1 {
		t.Fatalf("sensor history after reopen = %+v, %v", series, err)
	}
	if h, _ := db.History("telegram:12345"); len(h) != 5 {
		t.Fatalf("%d messages after a new turn", len(h))
	}
}

// TestNewerSchemaStopsWithoutTouching: a file written by a newer perch is
// refused with a message that says what to do, and not a byte changes (no
// compaction, no migration, no marker left).
func TestNewerSchemaStopsWithoutTouching(t *testing.T) {
	path := filepath.Join(t.TempDir(), "perch.db")
	populate(t, path, 3)
	b, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	b.Update(func(tx *bolt.Tx) error {
		v := make([]byte, 8)
		binary.BigEndian.PutUint64(v, store.SchemaVersion+1)
		return tx.Bucket([]byte("meta")).Put([]byte("schema"), v)
	})
	b.Close()
	before, _ := os.ReadFile(path)
	st0, _ := os.Stat(path)
	_, err = store.Open(path, store.Options{})
	if !errors.Is(err, store.ErrNewerSchema) {
		t.Fatalf("err = %v", err)
	}
	want := "database schema v3 is newer than this perch (v2); upgrade perch or restore a backup"
	if !strings.Contains(err.Error(), want) {
		t.Fatalf("err = %q, want it to say %q", err, want)
	}
	after, _ := os.ReadFile(path)
	st1, _ := os.Stat(path)
	if !bytes.Equal(before, after) || !st0.ModTime().Equal(st1.ModTime()) {
		t.Fatal("the newer file was changed")
	}
	if store.MarkerUnclean(path) {
		t.Fatal("the marker was left saying open")
	}
	if len(store.DamagedCopies(path)) != 0 {
		t.Fatal("a newer file was set aside as damaged")
	}
}
