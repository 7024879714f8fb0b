package provider

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"syscall"

	"github.com/sashabaranov/go-openai"

	"github.com/perchhq/perch/appliance/config"
)

// transcribeModels are the speech-to-text models of the providers that
// serve /audio/transcriptions, in the order tried: Groq's is free and fast.
var transcribeModels = []struct{ provider, model string }{
	{"groq", "whisper-large-v3-turbo"},
	{"openai", "whisper-1"},
}

// NewTranscriber returns a client for POST {api_base}/audio/transcriptions
// of groq or openai, whichever has a key (groq first), or nil when neither
// has one: voice messages then reach the model as a note saying they could
// not be transcribed.
func NewTranscriber(ctx context.Context, cfg *config.Config, log *slog.Logger) (*Client, error) {
	for _, t := range transcribeModels {
		p, _ := cfg.Provider(t.provider)
		if !p.APIKey.IsSet() {
			continue
		}
		return New(ctx, Options{Choice: Choice{Name: t.provider, Model: t.model, Configured: t.model}, Settings: *p, Log: log})
	}
	return nil, nil
}

// Transcribe sends the audio file at path to {api_base}/audio/transcriptions
// and returns the text.
func (c *Client) Transcribe(ctx context.Context, path string) (string, error) {
	// The file lies in the workspace, where commands write too: a link in
	// its place (to the config) is not followed, nor a FIFO waited on.
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return "", fmt.Errorf("transcription: %w", err)
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		return "", fmt.Errorf("transcription: %s is not a regular file", filepath.Base(path))
	}
	st := &callState{}
	resp, err := c.oa.CreateTranscription(withState(ctx, st), openai.AudioRequest{Model: c.choice.Model, FilePath: filepath.Base(path), Reader: f})
	if err != nil {
		if ctx.Err() != nil {
			return "", ctx.Err()
		}
		return "", fmt.Errorf("transcription: %w", c.classify(err, c.choice.Model, int(st.retries.Load())))
	}
	return resp.Text, nil
}
