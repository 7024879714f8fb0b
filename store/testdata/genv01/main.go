package main

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"strings"

	"github.com/perchhq/perch/appliance/schedule"
	"github.com/perchhq/perch/drivers/usb"
	"github.com/perchhq/perch/store"
)

func main() {
	path := os.Args[1]
	db, err := store.Open(path, store.Options{})
	if err != nil {
		panic(err)
	}
	// A telegram session with a tool exchange and token usage.
	must(db.Append("telegram:12345", []store.Message{{Role: "user", Content: "what's the temperature in the greenhouse?", Time: 1763880000000}}, store.Usage{}, 200, "telegram", "12345"))
	must(db.Append("telegram:12345", []store.Message{
		{Role: "assistant", ToolCalls: []store.ToolCall{{ID: "call_1", Name: "sensor", Arguments: `{"action":"read","name":"greenhouse"}`}}, Time: 1763880001000},
		{Role: "tool", ToolCallID: "call_1", Name: "sensor", Content: `{"temperature_c":18.4,"humidity_pct":71}`, Time: 1763880001500},
		{Role: "assistant", Content: "It is 18.4 °C with 71 % humidity — snug. 🌱", Time: 1763880002000},
	}, store.Usage{PromptTokens: 812, CompletionTokens: 64, TotalTokens: 876}, 200, "telegram", "12345"))
	// A long session trimmed by history_limit (message sequence numbers no longer start at 1).
	for i := 0; i < 70; i++ {
		must(db.Append("cli:default", []store.Message{{Role: "user", Content: fmt.Sprintf("question %d", i)}, {Role: "assistant", Content: fmt.Sprintf("answer %d %s", i, strings.Repeat("·", i))}}, store.Usage{PromptTokens: 10, CompletionTokens: 5, TotalTokens: 15}, 100))
	}
	// A session with a large message (overflow pages).
	must(db.Append("rest:big", []store.Message{{Role: "user", Content: strings.Repeat("long line of text\n", 600)}, {Role: "assistant", Content: "ok"}}, store.Usage{}, 200))
	// Cron jobs written by the real scheduler.
	s := schedule.New(schedule.Options{Store: db, Log: slog.New(slog.DiscardHandler)})
	every := int64(3600)
	at := int64(600)
	_, err = s.Add(schedule.Job{Message: "water the plants", Deliver: true, Channel: "telegram", To: "12345", Schedule: schedule.Schedule{EverySeconds: &every}, Enabled: true})
	must(err)
	_, err = s.Add(schedule.Job{Message: "weekly report", Schedule: schedule.Schedule{CronExpr: "0 9 * * 1", TZ: "Europe/Berlin"}, Enabled: true})
	must(err)
	_, err = s.Add(schedule.Job{Message: "remind me", Schedule: schedule.Schedule{AtSeconds: &at}, Enabled: true})
	must(err)
	// The device service's saved state, in its own format.
	st := struct {
		Version int          `json:"version"`
		Devices []usb.Device `json:"devices"`
	}{1, []usb.Device{{Path: "/devices/platform/scb/usb1/1-1/1-1.3", Port: "1-1.3", Bus: 1, Dev: 4, VendorID: "0403", ProductID: "6001", Manufacturer: "FTDI", Product: "FT232R USB UART"}}}
	data, _ := json.Marshal(st)
	must(db.SaveDevices(data))
	must(db.Close())
}

func must(err error) {
	if err != nil {
		panic(err)
	}
}
