package channel

import (
	"bytes"
	"io"
	"mime/multipart"
	"net/http"
	"testing"
)

// TestBodyReplays: a body attached to a request reads the same bytes from
// GetBody as from Body (net/http's replay), with the length it announced.
func TestBodyReplays(t *testing.T) {
	var buf bytes.Buffer
	w := multipart.NewWriter(&buf)
	w.WriteField("chat_id", "42")
	if _, err := w.CreateFormFile("document", "a.txt"); err != nil {
		t.Fatal(err)
	}
	data := []byte("the file's bytes")
	b, err := MultipartBody(&buf, w, data)
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest(http.MethodPost, "http://x/", nil)
	b.Attach(req)
	first, _ := io.ReadAll(req.Body)
	again, _ := req.GetBody()
	second, _ := io.ReadAll(again)
	if !bytes.Equal(first, second) || int64(len(first)) != req.ContentLength {
		t.Fatalf("replay differs or length %d != %d", len(first), req.ContentLength)
	}
	// A multipart reader finds the field and the file whole.
	req.Body, _ = req.GetBody()
	if err := req.ParseMultipartForm(1 << 20); err != nil {
		t.Fatal(err)
	}
	f, _, err := req.FormFile("document")
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(f)
	if req.FormValue("chat_id") != "42" || !bytes.Equal(got, data) {
		t.Fatalf("field %q, file %q", req.FormValue("chat_id"), got)
	}
	j, err := JSONBody(map[string]int{"a": 1})
	if err != nil {
		t.Fatal(err)
	}
	req, _ = http.NewRequest(http.MethodPost, "http://x/", nil)
	j.Attach(req)
	if got, _ := io.ReadAll(req.Body); string(got) != `{"a":1}` || req.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("json body %q %q", got, req.Header.Get("Content-Type"))
	}
}
