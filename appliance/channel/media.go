package channel

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/perchhq/perch/appliance/bus"
)

// saveMedia downloads m's attachments under
// <workspace>/media/<channel>/<date>/<message>/ with the names the agent
// expects (image.jpg, audio.m4a, video.mp4), transcribes voice, and returns
// the saved files plus notes for the text: what was not downloaded and why,
// stickers as "[sticker]", transcripts.
func (in *Intake) saveMedia(ctx context.Context, m Message) ([]bus.Media, []string) {
	var media []bus.Media
	var notes []string
	for i, ref := range m.Media {
		switch ref.Kind {
		case MediaSticker:
			notes = append(notes, "[sticker]")
			continue
		case MediaFile:
			notes = append(notes, fileNote(ref))
			continue
		}
		if ref.Fetch == nil {
			notes = append(notes, fmt.Sprintf("[%s attached, but it cannot be downloaded]", ref.Kind))
			continue
		}
		if ref.Size > in.maxMedia {
			notes = append(notes, fmt.Sprintf("[%s attached, %s, not downloaded: larger than %s (%s)]",
				ref.Kind, sizeText(ref.Size), in.configKey("max_media_mb"), sizeText(in.maxMedia)))
			continue
		}
		path, err := in.download(ctx, m, i, ref)
		if err != nil {
			in.log.Warn("attachment not saved", "kind", ref.Kind, "err", err)
			notes = append(notes, fmt.Sprintf("[%s attached, not downloaded: %v]", ref.Kind, err))
			continue
		}
		kind := string(ref.Kind)
		if ref.Kind == MediaVoice || ref.Kind == MediaAudio {
			notes = append(notes, in.transcribe(ctx, ref.Kind, path))
			kind = string(MediaAudio)
		}
		media = append(media, bus.Media{Kind: kind, Path: path, Name: ref.Name, MIME: ref.MIME})
	}
	return media, notes
}

func fileNote(ref MediaRef) string {
	var parts []string
	if ref.Name != "" {
		parts = append(parts, fmt.Sprintf("%q", ref.Name))
	}
	if ref.Size > 0 {
		parts = append(parts, sizeText(ref.Size))
	}
	if ref.MIME != "" {
		parts = append(parts, ref.MIME)
	}
	if len(parts) == 0 {
		return "[file attached; files are not downloaded]"
	}
	return "[file attached: " + strings.Join(parts, ", ") + "; files are not downloaded]"
}

func (in *Intake) transcribe(ctx context.Context, kind MediaKind, path string) string {
	what := "voice message"
	if kind == MediaAudio {
		what = "audio message"
	}
	tr := in.hub.o.Transcribe
	if tr == nil {
		return fmt.Sprintf("[%s: it could not be transcribed, because no speech-to-text provider is configured (set providers.groq.api_key or providers.openai.api_key)]", what)
	}
	tctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	text, err := tr(tctx, path)
	if err != nil {
		in.log.Warn("transcription failed", "err", err)
		return fmt.Sprintf("[%s: it could not be transcribed: %v]", what, err)
	}
	if strings.TrimSpace(text) == "" {
		return fmt.Sprintf("[%s: the transcription is empty]", what)
	}
	return fmt.Sprintf("[%s, transcribed]: %s", what, strings.TrimSpace(text))
}

// download streams ref to its file, stopping at the size cap.
func (in *Intake) download(ctx context.Context, m Message, i int, ref MediaRef) (string, error) {
	if in.workspace == "" {
		return "", fmt.Errorf("no workspace to save it in")
	}
	dctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	body, size, err := ref.Fetch(dctx)
	if err != nil {
		return "", err
	}
	defer body.Close()
	if size > in.maxMedia {
		return "", fmt.Errorf("%s, larger than %s (%s)", sizeText(size), in.configKey("max_media_mb"), sizeText(in.maxMedia))
	}
	// The agent's commands write in the workspace too: through an
	// os.Root, a folder on the way that a command made a link out of it
	// (to the config's directory) is refused instead of written through,
	// and O_NONBLOCK keeps a FIFO in the file's place from blocking.
	if err := os.MkdirAll(in.workspace, 0o755); err != nil {
		return "", err
	}
	root, err := os.OpenRoot(in.workspace)
	if err != nil {
		return "", err
	}
	defer root.Close()
	dir := filepath.Join("media", in.name, time.Now().Format("2006-01-02"), messageDir(m))
	if err := root.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	name := mediaName(ref)
	if i > 0 {
		ext := filepath.Ext(name)
		name = fmt.Sprintf("%s-%d%s", strings.TrimSuffix(name, ext), i+1, ext)
	}
	rel := filepath.Join(dir, name)
	f, err := root.OpenFile(rel, os.O_CREATE|os.O_WRONLY|os.O_TRUNC|syscall.O_NONBLOCK, 0o644)
	if err != nil {
		return "", err
	}
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		f.Close()
		return "", fmt.Errorf("%s is not a regular file", rel)
	}
	path := filepath.Join(in.workspace, rel)
	n, err := io.Copy(f, io.LimitReader(body, in.maxMedia+1))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil && n > in.maxMedia {
		err = fmt.Errorf("larger than %s (%s)", in.configKey("max_media_mb"), sizeText(in.maxMedia))
	}
	if err != nil {
		root.Remove(rel)
		return "", err
	}
	return path, nil
}

// messageDir names the folder of one message's files: its platform id when
// it makes a safe name, else a random one.
func messageDir(m Message) string {
	id := m.MessageID
	ok := id != "" && len(id) <= 64
	for _, r := range id {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.') {
			ok = false
			break
		}
	}
	if ok && id != "." && id != ".." {
		return id
	}
	b := make([]byte, 6)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// mediaName is the file name for a kind: the fixed names the agent knows,
// with the extension the content has when the platform says it differs.
func mediaName(ref MediaRef) string {
	mime := strings.ToLower(ref.MIME)
	switch ref.Kind {
	case MediaImage:
		switch {
		case strings.Contains(mime, "png"):
			return "image.png"
		case strings.Contains(mime, "webp"):
			return "image.webp"
		case strings.Contains(mime, "gif"):
			return "image.gif"
		}
		return "image.jpg"
	case MediaVoice, MediaAudio:
		switch {
		case strings.Contains(mime, "ogg"), strings.Contains(mime, "opus"):
			return "audio.ogg"
		case strings.Contains(mime, "mpeg"), strings.Contains(mime, "mp3"):
			return "audio.mp3"
		case strings.Contains(mime, "wav"):
			return "audio.wav"
		}
		return "audio.m4a"
	case MediaVideo:
		if strings.Contains(mime, "webm") {
			return "video.webm"
		}
		return "video.mp4"
	}
	return string(ref.Kind)
}

func sizeText(n int64) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%d KB", n>>10)
	}
	return fmt.Sprintf("%d bytes", n)
}
