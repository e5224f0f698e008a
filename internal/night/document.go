package night

import (
	"errors"
	"fmt"
	"io"
	"os"
)

// DefaultMaxDocument is the largest document extract reads when Env.MaxDocumentBytes is 0.
const DefaultMaxDocument = 4 << 20

// ErrDocumentTooLarge: a document is over the size limit (CAIRN_MAX_DOCUMENT_BYTES); its
// invoice is parked, the document never read whole.
var ErrDocumentTooLarge = errors.New("document too large")

func (e *Env) maxDocument() int64 {
	if e.MaxDocumentBytes > 0 {
		return e.MaxDocumentBytes
	}
	return DefaultMaxDocument
}

// readDocument reads the document at path if it is at most limit bytes. A larger one is
// ErrDocumentTooLarge, known by its size before any byte is read, or, should it grow in
// between, after limit+1 bytes: no more than that is ever held.
func readDocument(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if st.Size() > limit {
		return nil, tooLarge(st.Size(), limit)
	}
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > limit {
		return nil, tooLarge(int64(len(b)), limit)
	}
	return b, nil
}

func tooLarge(size, limit int64) error {
	return fmt.Errorf("%w: %d bytes or more, over the limit of %d (CAIRN_MAX_DOCUMENT_BYTES)", ErrDocumentTooLarge, size, limit)
}
