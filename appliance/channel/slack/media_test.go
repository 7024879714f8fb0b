package slack

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/perchhq/perch/appliance/channel"
	"github.com/perchhq/perch/appliance/channel/channeltest"
	"github.com/perchhq/perch/appliance/channel/slack/slacktest"
	"github.com/perchhq/perch/appliance/config"
	"github.com/perchhq/perch/appliance/provider"
	"github.com/perchhq/perch/appliance/provider/providertest"
)

// transcriber is the production speech-to-text client pointed at the fake
// provider's /audio/transcriptions.
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

// TestVoiceClipTranscribed: a voice clip recorded in Slack is downloaded,
// transcribed through the Whisper-compatible endpoint, and read by the
// model as text.
func TestVoiceClipTranscribed(t *testing.T) {
	f := newFake(t)
	prov := providertest.New()
	t.Cleanup(prov.Close)
	prov.Transcript = "turn on the greenhouse fan"
	h := start(t, f, setup{env: channeltest.Options{Provider: prov, Transcribe: transcriber(t, prov)}})
	h.connected(t)
	f.PostMessage(slacktest.Message{Channel: "D1", ChannelType: "im", User: "U1",
		Files: []slacktest.File{{Name: "audio_message.m4a", Mimetype: "audio/mp4", Subtype: "slack_audio", Data: []byte("fake m4a audio")}}})
	waitPosted(t, f, 1)
	if got := lastUser(t, prov); !strings.Contains(got, "[voice message, transcribed]: turn on the greenhouse fan") {
		t.Errorf("the model read %q", got)
	}
	if tx := prov.Transcribed(); len(tx) != 1 {
		t.Errorf("%d transcriptions, want 1", len(tx))
	}
}

// TestImageReplyArrivesAsAFile: an image the agent makes (a canvas image
// node) reaches the thread as an uploaded file after the text.
func TestImageReplyArrivesAsAFile(t *testing.T) {
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
	ts := f.PostMessage(slacktest.Message{Channel: "C1", User: "U1", Text: "<@" + f.BotUserID + "> draw a sunrise"})
	got := waitPosted(t, f, 2)
	if got[0].Text != "Here is your picture." || got[1].File == "" || len(got[1].FileData) < 60 || got[1].ThreadTS != ts || got[1].Channel != "C1" {
		t.Fatalf("posted %v; want the text, then the image in thread %s", got, ts)
	}
}

// TestUnknownSendersGetOnlySafeTools: with allow_from empty a Slack
// sender's turn is offered no tool that changes the board.
func TestUnknownSendersGetOnlySafeTools(t *testing.T) {
	f := newFake(t)
	prov := providertest.New()
	t.Cleanup(prov.Close)
	h := start(t, f, setup{env: channeltest.Options{Provider: prov, TestTools: true}})
	h.connected(t)
	f.PostMessage(slacktest.Message{Channel: "D1", ChannelType: "im", User: "U1", Text: "switch the relay"})
	waitPosted(t, f, 1)
	var offered []string
	for _, tool := range prov.Requests()[0].Body.Tools {
		b, _ := json.Marshal(tool)
		offered = append(offered, string(b))
	}
	all := strings.Join(offered, "\n")
	if strings.Contains(all, `"switch_relay"`) || !strings.Contains(all, `"read_sensor"`) {
		t.Errorf("tools offered to an unknown Slack sender:\n%s", all)
	}
}
