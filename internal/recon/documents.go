package recon

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// docExt is the extension of an invoice document in the inbox.
const docExt = ".txt"

// Document is one invoice document in the inbox.
type Document struct {
	InvoiceNo string `json:"invoice_no"`
	Path      string `json:"path"`
	Digest    string `json:"digest"` // sha256:<hex> of the content
	Size      int64  `json:"size"`
}

// NightDir is where a night's documents arrive: <inboxDir>/<warehouse>/<date>.
func NightDir(inboxDir, warehouse, date string) string {
	return filepath.Join(inboxDir, warehouse, date)
}

// ListDocuments hashes every <invoice_no>.txt in the night's inbox folder and returns
// them sorted by invoice number. Hidden files and other extensions are ignored; a .txt
// whose name is not a valid invoice number is an error, since it would break the keys.
// A missing folder is an error wrapping fs.ErrNotExist.
func ListDocuments(inboxDir, warehouse, date string) ([]Document, error) {
	if err := checkID("warehouse", warehouse); err != nil {
		return nil, fmt.Errorf("listing documents: %w", err)
	}
	if err := checkDate("date", date); err != nil {
		return nil, fmt.Errorf("listing documents: %w", err)
	}
	dir := NightDir(inboxDir, warehouse, date)
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("listing documents in %q: %w", dir, err)
	}
	docs := make([]Document, 0, len(entries))
	buf := make([]byte, 32<<10) // one for every document: a big night has 100,000
	for _, e := range entries {
		name := e.Name()
		if strings.HasPrefix(name, ".") || !strings.HasSuffix(name, docExt) || !e.Type().IsRegular() {
			continue
		}
		no := strings.TrimSuffix(name, docExt)
		if err := checkID("invoice number", no); err != nil {
			return nil, fmt.Errorf("listing documents in %q: %w", dir, err)
		}
		d, err := hashDocument(filepath.Join(dir, name), buf)
		if err != nil {
			return nil, err
		}
		d.InvoiceNo = no
		docs = append(docs, d)
	}
	slices.SortFunc(docs, func(a, b Document) int { return cmp.Compare(a.InvoiceNo, b.InvoiceNo) })
	return docs, nil
}

func hashDocument(path string, buf []byte) (Document, error) {
	f, err := os.Open(path)
	if err != nil {
		return Document{}, fmt.Errorf("reading document %q: %w", path, err)
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.CopyBuffer(h, struct{ io.Reader }{f}, buf) // the struct hides File.WriteTo, which would not use buf
	if err != nil {
		return Document{}, fmt.Errorf("reading document %q: %w", path, err)
	}
	return Document{Path: path, Digest: "sha256:" + hex.EncodeToString(h.Sum(nil)), Size: n}, nil
}

// DocumentDigest is the digest of content in the form Document.Digest uses.
func DocumentDigest(content []byte) string {
	sum := sha256.Sum256(content)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// SourceFingerprint is sha256:<hex> over one "<invoice_no> <digest>\n" line per document,
// in invoice-number order whatever the order of docs: it changes when any document is
// added, removed or altered, and only then.
func SourceFingerprint(docs []Document) string {
	byNo := func(a, b Document) int { return cmp.Compare(a.InvoiceNo, b.InvoiceNo) }
	sorted := docs // ListDocuments sorts them; a copy only for another order
	if !slices.IsSortedFunc(docs, byNo) {
		sorted = slices.SortedFunc(slices.Values(docs), byNo)
	}
	h := sha256.New()
	for _, d := range sorted {
		fmt.Fprintf(h, "%s %s\n", d.InvoiceNo, d.Digest)
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil))
}
