package channel

import (
	"bytes"
	"encoding/json"
	"io"
	"mime/multipart"
	"net/http"
)

// Body is a request body a platform client can produce again: net/http
// replays it on a connection that closed under it (an HTTP/2 GOAWAY), and
// a client repeats a call from the start after a rate limit.
type Body struct {
	ctype string
	size  int64
	open  func() io.Reader
}

// JSONBody encodes v as a JSON body.
func JSONBody(v any) (*Body, error) {
	data, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return &Body{ctype: "application/json", size: int64(len(data)), open: func() io.Reader { return bytes.NewReader(data) }}, nil
}

// MultipartBody finishes a multipart/form-data body whose last part's
// header w has just written to buf, with data as that part's content. The
// file's bytes are not copied: the body is the part headers, the data and
// the closing boundary read in turn, and its length is known beforehand.
func MultipartBody(buf *bytes.Buffer, w *multipart.Writer, data []byte) (*Body, error) {
	cut := buf.Len()
	if err := w.Close(); err != nil {
		return nil, err
	}
	head, tail := buf.Bytes()[:cut], buf.Bytes()[cut:]
	return &Body{ctype: w.FormDataContentType(), size: int64(len(head) + len(data) + len(tail)), open: func() io.Reader {
		return io.MultiReader(bytes.NewReader(head), bytes.NewReader(data), bytes.NewReader(tail))
	}}, nil
}

// Attach makes b req's body, content type and length included.
func (b *Body) Attach(req *http.Request) {
	req.Header.Set("Content-Type", b.ctype)
	req.ContentLength = b.size
	req.Body = io.NopCloser(b.open())
	req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(b.open()), nil }
}
