package provider

import (
	"context"
	"errors"
	"strings"

	"github.com/sashabaranov/go-openai"
)

// GenerateImage asks POST {api_base}/images/generations for one image of
// size ("1024x1024") and returns it base64-encoded with its MIME type.
func (c *Client) GenerateImage(ctx context.Context, prompt, size string) (b64, mime string, err error) {
	model := c.imageModel
	req := openai.ImageRequest{Prompt: prompt, Model: model, Size: size, N: 1}
	if !strings.HasPrefix(model, "gpt-image") {
		// gpt-image models always answer in base64 and reject the field.
		req.ResponseFormat = openai.CreateImageResponseFormatB64JSON
	}
	st := &callState{}
	resp, err := c.oa.CreateImage(withState(ctx, st), req)
	if err != nil {
		if ctx.Err() != nil {
			return "", "", ctx.Err()
		}
		return "", "", c.classify(err, model, int(st.retries.Load()))
	}
	if len(resp.Data) == 0 || resp.Data[0].B64JSON == "" {
		return "", "", errors.New("provider " + c.name + ": the image response holds no base64 image")
	}
	mime = "image/png"
	if strings.HasPrefix(resp.Data[0].B64JSON, "/9j/") {
		mime = "image/jpeg"
	} else if strings.HasPrefix(resp.Data[0].B64JSON, "UklGR") {
		mime = "image/webp"
	}
	return resp.Data[0].B64JSON, mime, nil
}
