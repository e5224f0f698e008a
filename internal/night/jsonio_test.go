package night

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/cairnhq/cairn/internal/books"
	"github.com/cairnhq/cairn/internal/natstest"
	"github.com/cairnhq/cairn/internal/recon"
	"github.com/cairnhq/cairn/pkg/artifacts"
	"github.com/cairnhq/cairn/pkg/assets"
	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
)

// TestOutputIsMarshal: every output the night writes encodes byte for byte as json.Marshal
// would, and decodes as json.Unmarshal would, lists empty, absent or full.
func TestOutputIsMarshal(t *testing.T) {
	inv := recon.Invoice{InvoiceNo: "INV-1", SupplierID: "SUP-01", SupplierName: "Sharma & Sons <Steel>", PORef: "PO-1",
		Lines: []recon.Line{{No: 1, SKU: "NUT-M8", Desc: "Hex nut \"M8\"", Qty: 200, UnitPaise: 325, AmountPaise: 65000}}, TotalPaise: 65000}
	entry := books.Entry{Key: "r:INV-1:1:price", RunID: "r", InvoiceNo: "INV-1", Line: 1, Kind: "price", SupplierID: "SUP-01", AmountPaise: 12000}
	adj := recon.Adjustment{InvoiceNo: "INV-1", Line: 1, Kind: "price", SupplierID: "SUP-01", SKU: "NUT-M8", AmountPaise: 12000, ValueDeltaPaise: -12000}
	for _, v := range []any{
		fetchOutput{Documents: []recon.Document{{InvoiceNo: "INV-1", Path: "/in/INV-1.txt", Digest: "sha256:ab", Size: 9}}, Fingerprint: "sha256:cd"},
		fetchOutput{},
		extractOutput{Invoices: []recon.Invoice{inv, inv}, Parked: []recon.Parked{{InvoiceNo: "INV-2", Reason: "no lines"}}},
		extractOutput{Invoices: []recon.Invoice{}, Parked: nil},
		matchOutput{Matches: []recon.Match{{InvoiceNo: "INV-1", Line: 1, SKU: "NUT-M8"}}, Unmatched: []recon.Unmatched{}},
		snapshot{Receipts: []recon.Receipt{{PO: "PO-1", Line: 1, SKU: "NUT-M8", Qty: 3}}, Levels: []recon.StockLevel{{SKU: "NUT-M8", Qty: 1}}},
		compareOutput{Adjustments: []recon.Adjustment{adj}},
		ledgerOutput{Entries: []books.Entry{entry}, Reversals: nil},
		ledgerOutput{Entries: []books.Entry{entry}, Reversals: []books.Entry{entry}},
		stockOutput{},
		noteOutput{Notes: []queuedNote{{SupplierID: "SUP-01", TotalPaise: 1, Key: "r:debit:SUP-01"}}, Withdrawn: []string{"r:debit:SUP-02"}},
		reportOutput{Keys: []string{"r:report"}, Report: recon.Report{Invoices: 1}},
	} {
		want, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		got, err := (&doc{partSize: partSize, b: []byte{'{'}}).encode(v)
		if err != nil {
			t.Fatalf("output(%T): %v", v, err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("output(%T) =\n%s\nwant\n%s", v, got, want)
		}
		wantBack := reflect.New(reflect.TypeOf(v))
		if err := json.Unmarshal(want, wantBack.Interface()); err != nil {
			t.Fatal(err)
		}
		gotBack := reflect.New(reflect.TypeOf(v))
		if err := (&reader{}).decodeFields(bytes.NewReader(append(got, " \n"...)), gotBack.Interface()); err != nil {
			t.Fatalf("decodeFields(%T): %v", v, err)
		}
		if !reflect.DeepEqual(gotBack.Interface(), wantBack.Interface()) {
			t.Errorf("decodeFields(%T) = %+v, want %+v", v, gotBack.Elem(), wantBack.Elem())
		}
	}
}

// TestDecodeFieldsRefuses: a document that is not the output's shape is an error.
func TestDecodeFieldsRefuses(t *testing.T) {
	for _, doc := range []string{``, `[]`, `{"documents": 3}`, `{"documents": [1]}`, `{"documents": [`, `{"fingerprint": "x"`} {
		var f fetchOutput
		if err := (&reader{}).decodeFields(bytes.NewReader([]byte(doc)), &f); err == nil {
			t.Errorf("decodeFields(%q) = nil error", doc)
		}
	}
	var f fetchOutput
	if err := (&reader{}).decodeFields(bytes.NewReader([]byte(`{"other": {"a": [1]}, "Fingerprint": "x", "documents": null}`)), &f); err != nil || f.Fingerprint != "x" || f.Documents != nil {
		t.Errorf("decodeFields with an unknown key and a key in other case = %+v, %v", f, err)
	}
}

// TestOutputInParts: a list that outgrows the part size is stored in parts, the output
// holding only the pointer to their index, and reads back element for element, through
// decodeFields and through each; an index that is not what its pointer says is refused.
func TestOutputInParts(t *testing.T) {
	ctx := t.Context()
	js := natstest.JetStream(t)
	if _, err := js.CreateObjectStore(ctx, jetstream.ObjectStoreConfig{Bucket: assets.ObjectArtifacts}); err != nil {
		t.Fatal(err)
	}
	arts, err := artifacts.Open(ctx, js, assets.ObjectArtifacts)
	if err != nil {
		t.Fatal(err)
	}
	var saved []*kc.Output
	d := &doc{partSize: 1100, b: []byte{'{'}, save: func(data []byte, object bool) (*kc.Output, error) {
		save := arts.Save
		if object {
			save = arts.SaveObject
		}
		p, err := save(ctx, "run-1", "match", data)
		saved = append(saved, p)
		return p, err
	}}
	want := matchOutput{Unmatched: []recon.Unmatched{{InvoiceNo: "INV-9", Line: 2, Reason: "no such line"}}}
	for i := range 60 {
		want.Matches = append(want.Matches, recon.Match{InvoiceNo: fmt.Sprintf("INV-%d", i), Line: 1, SKU: "NUT-M8", BilledQty: int64(i)})
	}
	b, err := d.encode(want)
	if err != nil {
		t.Fatal(err)
	}
	if len(saved) < 6 || saved[0].Object == "" || len(b) > 400 || !bytes.Contains(b, []byte(`"matches":{"index":{"object":`)) {
		t.Fatalf("encoded in %d parts: %s", len(saved), b)
	}
	rd := &reader{ctx: ctx, arts: arts}
	var got matchOutput
	if err := rd.decodeFields(bytes.NewReader(b), &got); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("read back %+v, want %+v", got, want)
	}
	n := 0
	if err := rd.object(json.NewDecoder(bytes.NewReader(b)), fields{"matches": each(func(m recon.Match) error {
		if m.InvoiceNo != want.Matches[n].InvoiceNo {
			t.Errorf("element %d is %s, want %s", n, m.InvoiceNo, want.Matches[n].InvoiceNo)
		}
		n++
		return nil
	})}); err != nil || n != len(want.Matches) {
		t.Errorf("each read %d elements (%v), want %d", n, err, len(want.Matches))
	}
	index := saved[len(saved)-1]
	bad := bytes.Replace(b, []byte(index.Digest), []byte(saved[0].Digest), 1)
	if err := rd.decodeFields(bytes.NewReader(bad), &got); !errors.Is(err, artifacts.ErrDigest) {
		t.Errorf("an index under another's digest: %v, want ErrDigest", err)
	}
}
