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
	uri, mimeType, n, err := dataURI(b64, mimeType)
	if err != nil {
		return Errorf("generate_image: the image provider returned %v", err)
	}
	id := "img-" + randomHex(4)
	return Result{
		Kind: KindBasic,
		ForLLM: fmt.Sprintf("generated a %s %s image (%s) and showed it to the user on the canvas as node_id=%q",
			size, mimeType, formatSize(n), id),
		UI: []api.UICommand{{
			Command: "canvas", Action: "create_node", NodeID: id, Type: "image",
			Title: truncateRunes(prompt, 80), Content: uri,
		}},
	}
}

// dataURI checks the provider's base64 (streaming it through a decoder, so
// a 10 MB image is not decoded into memory), sniffs the type when missing,
// and returns a data: URI and the decoded size. A provider that already
// sent a data: URI is accepted as such.
func dataURI(b64, mimeType string) (string, string, int64, error) {
	if rest, ok := strings.CutPrefix(b64, "data:"); ok {
		meta, data, found := strings.Cut(rest, ",")
		if !found || !strings.HasSuffix(meta, ";base64") {
			return "", "", 0, fmt.Errorf("a data URI that is not base64")
		}
		mimeType, b64 = strings.TrimSuffix(meta, ";base64"), data
	}
	if b64 == "" {
		return "", "", 0, fmt.Errorf("no image data")
	}
	head := make([]byte, 512)
	dec := base64.NewDecoder(base64.StdEncoding, strings.NewReader(b64))
	k, err := io.ReadFull(dec, head)
	if err != nil && err != io.ErrUnexpectedEOF {
		return "", "", 0, fmt.Errorf("image data that is not base64: %v", err)
	}
	rest, err := io.Copy(io.Discard, dec)
	if err != nil {
		return "", "", 0, fmt.Errorf("image data that is not base64: %v", err)
	}
	if mt, _, err := mime.ParseMediaType(mimeType); err == nil && mt != "" {
		mimeType = mt
	} else {
		mimeType = http.DetectContentType(head[:k])
	}
	if !strings.HasPrefix(mimeType, "image/") {
		return "", "", 0, fmt.Errorf("data of type %s, not an image", mimeType)
	}
	return "data:" + mimeType + ";base64," + b64, mimeType, int64(k) + rest, nil
}

func anyStrings(s []string) []any {
	out := make([]any, len(s))
	for i, v := range s {
		out[i] = v
	}
	return out
}
