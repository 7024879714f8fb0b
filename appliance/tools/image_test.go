package tools

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"image"
	"image/color"
	"image/gif"
	"image/jpeg"
	"image/png"
	"strings"
	"testing"
)

// fakeImages stands in for the provider's image endpoint.
type fakeImages struct {
	prompt, size string
	b64, mime    string
	err          error
}

func (f *fakeImages) GenerateImage(_ context.Context, prompt, size string) (string, string, error) {
	f.prompt, f.size = prompt, size
	return f.b64, f.mime, f.err
}

func pngBase64(t *testing.T, w, h int) string {
	t.Helper()
	img := image.NewNRGBA(image.Rect(0, 0, w, h))
	for x := range w {
		for y := range h {
			img.Set(x, y, color.NRGBA{uint8(x * 7), uint8(y * 13), uint8(x ^ y), 255})
		}
	}
	var buf bytes.Buffer
	must(t, png.Encode(&buf, img))
	return base64.StdEncoding.EncodeToString(buf.Bytes())
}

func imageRegistry(gen ImageGenerator) *Registry {
	return registryOf(NewImage(ImageOptions{Generator: gen}))
}

// TestGenerateImageGoesToTheCanvas: the user gets the image as a canvas
// node; the model gets one line, never the base64.
func TestGenerateImageGoesToTheCanvas(t *testing.T) {
	b64 := pngBase64(t, 600, 400) // a real image of some hundred KB
	gen := &fakeImages{b64: b64, mime: "image/png"}
	res := imageRegistry(gen).Execute(context.Background(), "generate_image",
		`{"prompt":"a robin on a Raspberry Pi, watercolour","resolution":"2K","aspect_ratio":"16:9"}`)
	wantOK(t, res)
	if gen.prompt != "a robin on a Raspberry Pi, watercolour" || gen.size != "2048x1152" {
		t.Errorf("generator got %q, %q", gen.prompt, gen.size)
	}
	if len(res.ForLLM) > 200 || strings.Contains(res.ForLLM, b64[:40]) {
		t.Errorf("the model's text carries the image: %d bytes", len(res.ForLLM))
	}
	if res.Kind != KindBasic || res.ForUser != "" {
		t.Errorf("kind %v, ForUser %d bytes: the image must not go out as chat text", res.Kind, len(res.ForUser))
	}
	if len(res.UI) != 1 {
		t.Fatalf("UI = %d commands", len(res.UI))
	}
	ui := res.UI[0]
	if ui.Command != "canvas" || ui.Action != "create_node" || ui.Type != "image" || ui.Title != "a robin on a Raspberry Pi, watercolour" {
		t.Errorf("UI command %+v", ui)
	}
	// The size the image has, not the one asked for: the provider chose.
	if !strings.Contains(res.ForLLM, `generated a 600x400 image/png image`) || !strings.Contains(res.ForLLM, `node_id="`+ui.NodeID+`"`) {
		t.Errorf("ForLLM = %q", res.ForLLM)
	}
	data, ok := strings.CutPrefix(ui.Content, "data:image/png;base64,")
	if !ok {
		t.Fatalf("content is not a PNG data URI: %.40s", ui.Content)
	}
	raw, err := base64.StdEncoding.DecodeString(data)
	must(t, err)
	if img, err := png.Decode(bytes.NewReader(raw)); err != nil || img.Bounds().Dx() != 600 {
		t.Errorf("data URI does not hold the image: %v", err)
	}
}

func TestGenerateImageProviderAnswers(t *testing.T) {
	png1 := pngBase64(t, 2, 2)
	tests := []struct {
		name     string
		gen      *fakeImages
		wantMIME string
		wantErr  []string
	}{
		{"MIME sniffed when missing", &fakeImages{b64: png1}, "image/png", nil},
		{"MIME with parameters", &fakeImages{b64: png1, mime: "image/png; charset=binary"}, "image/png", nil},
		{"data URI passed through", &fakeImages{b64: "data:image/png;base64," + png1}, "image/png", nil},
		{"provider error", &fakeImages{err: errors.New("HTTP 400: content policy")}, "", []string{"generate_image: the image provider failed: HTTP 400: content policy"}},
		{"empty data", &fakeImages{}, "", []string{"returned no image data"}},
		{"not base64", &fakeImages{b64: "%%%not-base64"}, "", []string{"not base64"}},
		{"not an image", &fakeImages{b64: base64.StdEncoding.EncodeToString([]byte("<html>quota exceeded</html>"))}, "", []string{"not an image"}},
		{"data URI not base64", &fakeImages{b64: "data:image/png,abc"}, "", []string{"not base64"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := imageRegistry(tt.gen).Execute(context.Background(), "generate_image", `{"prompt":"a cat"}`)
			if tt.wantErr != nil {
				wantErr(t, res, tt.wantErr...)
				return
			}
			wantOK(t, res)
			if tt.gen.size != "1024x1024" {
				t.Errorf("default size %q", tt.gen.size)
			}
			if want := "data:" + tt.wantMIME + ";base64," + png1; res.UI[0].Content != want {
				t.Errorf("content %.60s", res.UI[0].Content)
			}
		})
	}
}

func TestGenerateImageWithoutGenerator(t *testing.T) {
	res := imageRegistry(nil).Execute(context.Background(), "generate_image", `{"prompt":"a cat"}`)
	wantErr(t, res, "the configured provider has no image endpoint", "providers.openai.api_key")
	r := imageRegistry(&fakeImages{})
	wantErr(t, r.Execute(context.Background(), "generate_image", `{"prompt":" "}`), "prompt is empty")
	wantErr(t, r.Execute(context.Background(), "generate_image", `{"prompt":"x","resolution":"8K"}`), `"resolution" must be one of "1K", "2K", "4K"`)
	wantErr(t, r.Execute(context.Background(), "generate_image", `{"prompt":"x","aspect_ratio":"2:1"}`), `"aspect_ratio" must be one of`)
}

func TestImageSize(t *testing.T) {
	tests := map[[2]string]string{
		{"1K", "1:1"}: "1024x1024", {"1K", "4:3"}: "1024x768", {"1K", "3:4"}: "768x1024",
		{"1K", "16:9"}: "1024x576", {"1K", "9:16"}: "576x1024",
		{"2K", "1:1"}: "2048x2048", {"2K", "4:3"}: "2048x1536", {"2K", "9:16"}: "1152x2048",
		{"4K", "16:9"}: "4096x2304", {"4K", "3:4"}: "3072x4096",
		{"", ""}: "1024x1024", {"2k", "bad"}: "2048x2048", {"1K", "21:9"}: "1024x448",
	}
	for in, want := range tests {
		if got := ImageSize(in[0], in[1]); got != want {
			t.Errorf("ImageSize(%q, %q) = %s, want %s", in[0], in[1], got, want)
		}
	}
}

// TestPixelSize reads the size from the headers of the formats image
// providers answer with.
func TestPixelSize(t *testing.T) {
	img := image.NewNRGBA(image.Rect(0, 0, 321, 123))
	var p, j, g bytes.Buffer
	must(t, png.Encode(&p, img))
	must(t, jpeg.Encode(&j, img, nil))
	must(t, gif.Encode(&g, img, nil))
	// JPEG with a 9 KB APP1 (EXIF) block before its frame header.
	exif := append([]byte{0xff, 0xd8, 0xff, 0xe1, 0x23, 0x28}, make([]byte, 0x2326)...)
	bigJPEG := append(exif, j.Bytes()[2:]...)
	webp := func(chunk string, body ...byte) []byte {
		b := append([]byte("RIFF\x00\x00\x00\x00WEBP"+chunk+"\x00\x00\x00\x00"), body...)
		return append(b, make([]byte, 16)...)
	}
	tests := []struct {
		name string
		data []byte
		w, h int
	}{
		{"png", p.Bytes(), 321, 123},
		{"jpeg", j.Bytes(), 321, 123},
		{"jpeg after EXIF", bigJPEG, 321, 123},
		{"gif", g.Bytes(), 321, 123},
		// 1024x576 in each WebP layout.
		{"webp lossy", webp("VP8 ", 0x9d, 0x2a, 0x01, 0x9d, 0x01, 0x2a, 0x00, 0x04, 0x40, 0x02), 1024, 576},
		{"webp lossless", webp("VP8L", 0x2f, 0xff, 0xc3, 0x8f, 0x00), 1024, 576},
		{"webp extended", webp("VP8X", 0, 0, 0, 0, 0xff, 0x03, 0x00, 0x3f, 0x02, 0x00), 1024, 576},
	}
	for _, tt := range tests {
		if w, h, ok := pixelSize(tt.data[:min(len(tt.data), 16<<10)]); !ok || w != tt.w || h != tt.h {
			t.Errorf("%s: %dx%d %v, want %dx%d", tt.name, w, h, ok, tt.w, tt.h)
		}
	}
	if _, _, ok := pixelSize([]byte("\x89PNG\r\n\x1a\n")); ok {
		t.Error("a bare PNG signature has a size")
	}
}
