package channel

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"os"
	"path/filepath"
	"strings"

	"github.com/perchhq/perch/appliance/bus"
)

// Upload is an outbound attachment read into memory for upload.
type Upload struct {
	Name string
	MIME string
	Data []byte
}

// MaxOutMedia caps an outbound attachment (platforms take 10 to 50 MB).
const MaxOutMedia = 20 << 20

// OpenMedia reads an outbound attachment: a local file (Path) or a data:
// URL (an image generate_image made), at most max bytes (0: MaxOutMedia).
// http(s) URLs are not fetched here: a platform that takes a URL passes it
// on, others say so.
func OpenMedia(m bus.Media, max int64) (Upload, error) {
	if max <= 0 {
		max = MaxOutMedia
	}
	f := Upload{Name: m.Name, MIME: m.MIME}
	switch {
	case m.Path != "":
		fh, err := os.Open(m.Path)
		if err != nil {
			return f, err
		}
		defer fh.Close()
		data, err := io.ReadAll(io.LimitReader(fh, max+1))
		if err != nil {
			return f, err
		}
		if int64(len(data)) > max {
			return f, fmt.Errorf("%s is larger than %s", filepath.Base(m.Path), sizeText(max))
		}
		f.Data = data
		if f.Name == "" {
			f.Name = filepath.Base(m.Path)
		}
	case strings.HasPrefix(m.URL, "data:"):
		meta, payload, ok := strings.Cut(strings.TrimPrefix(m.URL, "data:"), ",")
		if !ok || !strings.HasSuffix(meta, ";base64") {
			return f, errors.New("a data: URL that is not base64")
		}
		if int64(base64.StdEncoding.DecodedLen(len(payload))) > max+3 {
			return f, fmt.Errorf("the attachment is larger than %s", sizeText(max))
		}
		data, err := io.ReadAll(base64.NewDecoder(base64.StdEncoding, strings.NewReader(payload)))
		if err != nil {
			return f, fmt.Errorf("a data: URL with bad base64: %w", err)
		}
		f.Data = data
		if f.MIME == "" {
			f.MIME = strings.TrimSuffix(meta, ";base64")
		}
	default:
		return f, fmt.Errorf("no local file or data: URL to send (%q)", clip(m.URL, 60))
	}
	if f.MIME == "" {
		f.MIME = http.DetectContentType(f.Data[:min(len(f.Data), 512)])
	}
	if f.Name == "" || filepath.Ext(f.Name) == "" {
		base := f.Name
		if base == "" {
			base = m.Kind
			if base == "" {
				base = "file"
			}
		}
		base = safeName(base)
		if exts, _ := mime.ExtensionsByType(f.MIME); len(exts) > 0 {
			ext := exts[0]
			if f.MIME == "image/jpeg" {
				ext = ".jpg"
			}
			base += ext
		}
		f.Name = base
	}
	return f, nil
}

// Reader returns the content as a reader.
func (f Upload) Reader() io.Reader { return bytes.NewReader(f.Data) }

// safeName keeps a file name short and free of path characters.
func safeName(s string) string {
	s = strings.Map(func(r rune) rune {
		if r == '/' || r == '\\' || r < ' ' {
			return '_'
		}
		return r
	}, s)
	if len([]rune(s)) > 48 {
		s = string([]rune(s)[:48])
	}
	return strings.TrimSpace(s)
}
