package tools

import (
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"math"
	"mime"
	"net/http"
	"strings"

	"github.com/perchhq/perch/appliance/api"
)

// ImageGenerator makes an image from a prompt. The provider package
// implements it over POST {api_base}/images/generations with
// response_format b64_json.
type ImageGenerator interface {
	// GenerateImage returns the image as standard base64 and its MIME type
	// ("" when the provider does not say; the tool then sniffs it). size is
	// "<width>x<height>" in pixels, e.g. "1024x576".
	GenerateImage(ctx context.Context, prompt, size string) (b64, mimeType string, err error)
}

// ImageOptions configures generate_image.
type ImageOptions struct {
	// Generator is the provider's image endpoint; nil when the configured
	// provider has none, and the tool then says how to get one.
	Generator ImageGenerator
}

var (
	imageResolutions = []string{"1K", "2K", "4K"}
	imageAspects     = []string{"1:1", "3:4", "4:3", "9:16", "16:9"}
)

// NewImage returns the generate_image tool.
func NewImage(opts ImageOptions) Tool {
	g := &imageTool{gen: opts.Generator}
	return Func{
		ToolName: "generate_image",
		ToolDescription: "Generate an image from a text description. The image is shown to the user on the canvas; " +
			"you get a short confirmation, not the image itself.",
		Params: Object(map[string]*Property{
			"prompt":       String("What the image should show: subject, style, composition."),
			"resolution":   {Type: "string", Description: "Long edge: 1K = 1024, 2K = 2048, 4K = 4096 pixels; default 1K.", Enum: anyStrings(imageResolutions), Default: "1K"},
			"aspect_ratio": {Type: "string", Description: "Width:height; default 1:1.", Enum: anyStrings(imageAspects), Default: "1:1"},
		}, "prompt"),
		Run: g.run,
	}
}

type imageTool struct {
	gen ImageGenerator
}

// ImageSize maps a resolution (1K, 2K, 4K: the long edge) and an aspect
// ratio ("16:9") to a pixel size "<width>x<height>", the short edge rounded
// to a multiple of 64 as image models expect. Unknown values fall back to
// 1K and 1:1.
func ImageSize(resolution, aspect string) string {
	long := map[string]int{"1K": 1024, "2K": 2048, "4K": 4096}[strings.ToUpper(resolution)]
	if long == 0 {
		long = 1024
	}
	var w, h int
	if n, _ := fmt.Sscanf(aspect, "%d:%d", &w, &h); n != 2 || w <= 0 || h <= 0 {
		w, h = 1, 1
	}
	short := int(math.Round(float64(long)*float64(min(w, h))/float64(max(w, h))/64)) * 64
	if w >= h {
		return fmt.Sprintf("%dx%d", long, short)
	}
	return fmt.Sprintf("%dx%d", short, long)
}

// run returns the image to the user as a canvas image node holding a
// data: URI, and only a one-line note to the model. A KindUser result would
// put the URI in ForUser, which chat platforms would receive as a text
// message of megabytes (Telegram stops at 4096 characters), and in ForLLM,
// where it would fill the model's context with base64 it cannot see.
func (g *imageTool) run(ctx context.Context, args Args) Result {
	prompt := strings.TrimSpace(args.String("prompt"))
	if prompt == "" {
		return Errorf("generate_image: prompt is empty; describe the image to make")
	}
	if g.gen == nil {
		return Errorf("generate_image: the configured provider has no image endpoint; set providers.openai.api_key (or another provider that serves /images/generations) to generate images")
	}
	size := ImageSize(args.String("resolution"), args.String("aspect_ratio"))
	b64, mimeType, err := g.gen.GenerateImage(ctx, prompt, size)
	if err != nil {
		return Errorf("generate_image: the image provider failed: %w", err)
	}
	uri, mimeType, n, dims, err := dataURI(b64, mimeType)
	if err != nil {
		return Errorf("generate_image: the image provider returned %v", err)
	}
	// The size the image has, which a provider may choose otherwise than
	// asked (the nearest it makes); the one asked for when the image's
	// header does not say.
	what := fmt.Sprintf("a %s %s image (%s)", dims, mimeType, formatSize(n))
	if dims == "" {
		what = fmt.Sprintf("an %s image (%s; %s was asked for)", mimeType, formatSize(n), size)
	}
	id := "img-" + randomHex(4)
	return Result{
		Kind: KindBasic,
		ForLLM: fmt.Sprintf("generated %s and showed it to the user on the canvas as node_id=%q",
			what, id),
		UI: []api.UICommand{{
			Command: "canvas", Action: "create_node", NodeID: id, Type: "image",
			Title: truncateRunes(prompt, 80), Content: uri,
		}},
	}
}

// dataURI checks the provider's base64 (streaming it through a decoder, so
// a 10 MB image is not decoded into memory), sniffs the type when missing,
// and returns a data: URI, the decoded size, and the pixel size
// ("<width>x<height>") when the header says it. A provider that already
// sent a data: URI is accepted as such.
func dataURI(b64, mimeType string) (uri, mt string, n int64, dims string, err error) {
	uri, mt, n, head, err := readImage(b64, mimeType)
	if err != nil {
		return "", "", 0, "", err
	}
	if w, h, ok := pixelSize(head); ok {
		dims = fmt.Sprintf("%dx%d", w, h)
	}
	return uri, mt, n, dims, nil
}

// pixelSize reads an image's width and height from its first bytes: PNG's
// IHDR, GIF's screen, WebP's VP8, VP8L or VP8X chunk, or a JPEG frame
// header within them.
func pixelSize(b []byte) (w, h int, ok bool) {
	be16 := func(p []byte) int { return int(p[0])<<8 | int(p[1]) }
	le16 := func(p []byte) int { return int(p[0]) | int(p[1])<<8 }
	switch {
	case len(b) >= 24 && string(b[:8]) == "\x89PNG\r\n\x1a\n" && string(b[12:16]) == "IHDR":
		return be16(b[16:18])<<16 | be16(b[18:20]), be16(b[20:22])<<16 | be16(b[22:24]), true
	case len(b) >= 10 && (string(b[:6]) == "GIF87a" || string(b[:6]) == "GIF89a"):
		return le16(b[6:8]), le16(b[8:10]), true
	case len(b) >= 30 && string(b[:4]) == "RIFF" && string(b[8:12]) == "WEBP":
		switch string(b[12:16]) {
		case "VP8 ":
			return le16(b[26:28]) & 0x3fff, le16(b[28:30]) & 0x3fff, true
		case "VP8L":
			bits := uint32(b[21]) | uint32(b[22])<<8 | uint32(b[23])<<16 | uint32(b[24])<<24
			return int(bits&0x3fff) + 1, int(bits>>14&0x3fff) + 1, true
		case "VP8X":
			return (int(b[24]) | int(b[25])<<8 | int(b[26])<<16) + 1, (int(b[27]) | int(b[28])<<8 | int(b[29])<<16) + 1, true
		}
	case len(b) >= 4 && b[0] == 0xff && b[1] == 0xd8:
		for i := 2; i+9 < len(b); {
			if b[i] != 0xff {
				return 0, 0, false
			}
			marker := b[i+1]
			switch {
			case marker == 0xff: // fill byte
				i++
				continue
			case marker >= 0xc0 && marker <= 0xcf && marker != 0xc4 && marker != 0xc8 && marker != 0xcc:
				return be16(b[i+7 : i+9]), be16(b[i+5 : i+7]), true
			}
			i += 2 + be16(b[i+2:i+4])
		}
	}
	return 0, 0, false
}

// readImage is dataURI's reading: the URI, the type, the decoded size and
// the first bytes, where pixelSize looks.
func readImage(b64, mimeType string) (string, string, int64, []byte, error) {
	if rest, ok := strings.CutPrefix(b64, "data:"); ok {
		meta, data, found := strings.Cut(rest, ",")
		if !found || !strings.HasSuffix(meta, ";base64") {
			return "", "", 0, nil, fmt.Errorf("a data URI that is not base64")
		}
		mimeType, b64 = strings.TrimSuffix(meta, ";base64"), data
	}
	if b64 == "" {
		return "", "", 0, nil, fmt.Errorf("no image data")
	}
	// Enough for a JPEG's frame header after its EXIF block, mostly.
	head := make([]byte, 16<<10)
	dec := base64.NewDecoder(base64.StdEncoding, strings.NewReader(b64))
	k, err := io.ReadFull(dec, head)
	if err != nil && err != io.ErrUnexpectedEOF {
		return "", "", 0, nil, fmt.Errorf("image data that is not base64: %v", err)
	}
	rest, err := io.Copy(io.Discard, dec)
	if err != nil {
		return "", "", 0, nil, fmt.Errorf("image data that is not base64: %v", err)
	}
	if mt, _, err := mime.ParseMediaType(mimeType); err == nil && mt != "" {
		mimeType = mt
	} else {
		mimeType = http.DetectContentType(head[:min(k, 512)])
	}
	if !strings.HasPrefix(mimeType, "image/") {
		return "", "", 0, nil, fmt.Errorf("data of type %s, not an image", mimeType)
	}
	return "data:" + mimeType + ";base64," + b64, mimeType, int64(k) + rest, head[:k], nil
}

func anyStrings(s []string) []any {
	out := make([]any, len(s))
	for i, v := range s {
		out[i] = v
	}
	return out
}
