package discord

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/perchhq/perch/appliance/channel"
	"github.com/perchhq/perch/appliance/channel/channeltest"
	"github.com/perchhq/perch/appliance/channel/discord/discordtest"
	"github.com/perchhq/perch/appliance/config"
	"github.com/perchhq/perch/appliance/provider"
	"github.com/perchhq/perch/appliance/provider/providertest"
)

func transcriber(t *testing.T, prov *providertest.Server) channel.TranscribeFunc {
	t.Helper()
	cfg := config.Default()
	cfg.Providers.Groq.APIKey = "gsk-test"
	cfg.Providers.Groq.APIBase = prov.Base()
	c, err := provider.NewTranscriber(context.Background(), cfg, nil)
	if err != nil || c == nil {
		t.Fatalf("transcriber: %v", err)
	}
	return c.Transcribe
}

// TestVoiceMessageTranscribed: a Discord voice message (the
// IS_VOICE_MESSAGE flag, an audio attachment) is transcribed through the
// Whisper-compatible endpoint and read by the model as text.
func TestVoiceMessageTranscribed(t *testing.T) {
	f := newFake(t)
	prov := providertest.New()
	t.Cleanup(prov.Close)
	prov.Transcript = "water the tomatoes"
	h := start(t, f, setup{env: channeltest.Options{Provider: prov, Transcribe: transcriber(t, prov)}})
	h.connected(t)
	m := dm(ann, "")
	m.Flags = 1 << 13
	m.Attachments = []discordtest.Attachment{f.AddAttachment("voice-message.ogg", "audio/ogg", []byte("OggS fake opus"))}
	f.Post(m)
	waitSent(t, f, 1)
	if got := lastUser(t, prov); !strings.Contains(got, "[voice message, transcribed]: water the tomatoes") {
		t.Errorf("the model read %q", got)
	}
	if tx := prov.Transcribed(); len(tx) != 1 {
		t.Errorf("%d transcriptions, want 1", len(tx))
	}
}

// TestImageReplyArrivesAsAnAttachment: an image the agent makes (a canvas
// image node) is uploaded after the text.
func TestImageReplyArrivesAsAnAttachment(t *testing.T) {
	f := newFake(t)
	prov := providertest.New()
	t.Cleanup(prov.Close)
	png := "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
	prov.Enqueue(
		providertest.Reply{ToolCalls: []providertest.ToolCall{{ID: "c1", Name: "canvas", Args: `{"action":"create_node","type":"image","title":"sunrise","content":"` + png + `"}`}}},
		providertest.Reply{Content: "Here is your picture."},
	)
	h := start(t, f, setup{env: channeltest.Options{Provider: prov, TestTools: true}})
	h.connected(t)
	m := f.Post(dm(ann, "draw a sunrise"))
	got := waitSent(t, f, 2)
	if got[0].Content != "Here is your picture." || got[0].ReplyTo != m.ID || len(got[1].Files) != 1 || len(got[1].FileData[0]) < 60 {
		t.Fatalf("sent %v; want the text replying to %s, then the image", got, m.ID)
	}
}

// TestUnknownSendersGetOnlySafeTools: with allow_from empty a Discord
// sender's turn is offered no tool that changes the board.
func TestUnknownSendersGetOnlySafeTools(t *testing.T) {
	f := newFake(t)
	prov := providertest.New()
	t.Cleanup(prov.Close)
	h := start(t, f, setup{env: channeltest.Options{Provider: prov, TestTools: true}})
	h.connected(t)
	f.Post(dm(bob, "switch the relay"))
	waitSent(t, f, 1)
	var offered []string
	for _, tool := range prov.Requests()[0].Body.Tools {
		b, _ := json.Marshal(tool)
		offered = append(offered, string(b))
	}
	all := strings.Join(offered, "\n")
	if strings.Contains(all, `"switch_relay"`) || !strings.Contains(all, `"read_sensor"`) {
		t.Errorf("tools offered to an unknown Discord sender:\n%s", all)
	}
}
