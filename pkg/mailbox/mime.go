package mailbox

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"fmt"
	"io"
	"mime"
	"mime/quotedprintable"
	"strings"

	"github.com/emersion/go-message"
	"github.com/emersion/go-message/textproto"
)

// part is one attachment of a message, its bytes decoded.
type part struct {
	name string
	data []byte
}

// maxDepth bounds how deep multiparts nest: a mail is a few levels; a deeper one is broken
// or hostile.
const maxDepth = 16

// attachments are the parts of the message raw that are attachments, in the order they
// appear: a part whose Content-Disposition is "attachment", or that has a file name (the
// disposition's filename, or the older Content-Type name). A part's bytes are its body with
// the transfer encoding (base64, quoted-printable) removed and nothing else: a text
// attachment keeps its charset, so that its digest is that of the file the sender attached,
// whatever charsets the program that reads it knows. A message/rfc822 part (a forwarded
// mail) is one attachment when it is named, and is not looked into.
func attachments(raw []byte) ([]part, error) {
	br := bufio.NewReader(bytes.NewReader(raw))
	h, err := textproto.ReadHeader(br)
	if err != nil {
		return nil, fmt.Errorf("reading the message header: %w", err)
	}
	var out []part
	err = walk(message.Header{Header: h}, br, "1", 0, &out)
	return out, err
}

func walk(h message.Header, body io.Reader, path string, depth int, out *[]part) error {
	if depth > maxDepth {
		return fmt.Errorf("part %s: multiparts nested deeper than %d", path, maxDepth)
	}
	mt, params, _ := h.ContentType() // a malformed type is read as text/plain
	if strings.HasPrefix(mt, "multipart/") {
		if params["boundary"] == "" {
			return fmt.Errorf("part %s: %s without a boundary", path, mt)
		}
		mr := textproto.NewMultipartReader(body, params["boundary"])
		for i := 1; ; i++ {
			p, err := mr.NextPart()
			if err == io.EOF {
				return nil
			}
			if err != nil {
				return fmt.Errorf("part %s: %w", path, err)
			}
			sub := fmt.Sprintf("%s.%d", path, i)
			if depth == 0 {
				sub = fmt.Sprint(i) // IMAP's part numbers: the first level is 1, 2, ...
			}
			if err := walk(message.Header{Header: p.Header}, p, sub, depth+1, out); err != nil {
				return err
			}
		}
	}
	disp, dparams, _ := h.ContentDisposition()
	name := dparams["filename"]
	if name == "" {
		name = params["name"]
	}
	if !strings.EqualFold(disp, "attachment") && name == "" {
		return nil // the text of the mail
	}
	if dec, err := new(mime.WordDecoder).DecodeHeader(name); err == nil {
		name = dec // an RFC 2047 name, as some mailers still write them
	}
	if name == "" {
		name = "part-" + path
	}
	data, err := io.ReadAll(decoded(h.Get("Content-Transfer-Encoding"), body))
	if err != nil {
		return fmt.Errorf("attachment %q (part %s): %w", name, path, err)
	}
	*out = append(*out, part{name: name, data: data})
	return nil
}

// decoded is body without its transfer encoding; an unknown encoding is read as it is.
func decoded(enc string, body io.Reader) io.Reader {
	switch strings.ToLower(strings.TrimSpace(enc)) {
	case "base64":
		return base64.NewDecoder(base64.StdEncoding, noSpace{body})
	case "quoted-printable":
		return quotedprintable.NewReader(body)
	default:
		return body
	}
}

// noSpace drops the line breaks and blanks a base64 body is folded with.
type noSpace struct{ r io.Reader }

func (n noSpace) Read(p []byte) (int, error) {
	for {
		k, err := n.r.Read(p)
		j := 0
		for _, c := range p[:k] {
			if c != '\r' && c != '\n' && c != ' ' && c != '\t' {
				p[j] = c
				j++
			}
		}
		if j > 0 || err != nil {
			return j, err
		}
	}
}
