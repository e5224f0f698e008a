package recon

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
)

// maxGenInvoices bounds one night, so a typo cannot fill a disk.
const maxGenInvoices = 10_000_000

// unreadableReason is what RuleExtractor says of a garbled document.
const unreadableReason = "no line items found"

// GenConfig is one night to generate.
type GenConfig struct {
	Warehouse, Date string // date "2006-01-02"
	Invoices        int    // readable invoices
	Mismatches      int    // mismatching lines, at most one per line
	Unreadable      int    // garbled invoices, numbered after the readable ones
	Seed            int64
	InboxDir        string // documents go to <InboxDir>/<warehouse>/<date>/<invoice_no>.txt
	ERPPath         string // the ERP database: a SQLite file path, sqlite:PATH or a postgres:// DSN (tables created if missing)
	TruthDir        string // truth goes to <TruthDir>/<warehouse>/<date>.json
}

// Validate returns one sentence naming the first bad field, or nil.
func (c GenConfig) Validate() error {
	switch {
	case !validID(c.Warehouse):
		return fmt.Errorf("%w: Warehouse %q must match ^[A-Za-z0-9_-]{1,64}$", ErrInvalidConfig, c.Warehouse)
	case checkDate("Date", c.Date) != nil:
		return fmt.Errorf("%w: Date %q must be a date written yyyy-mm-dd", ErrInvalidConfig, c.Date)
	case c.Invoices < 0 || c.Invoices > maxGenInvoices:
		return fmt.Errorf("%w: Invoices must be between 0 and %d, got %d", ErrInvalidConfig, maxGenInvoices, c.Invoices)
	case c.Unreadable < 0 || c.Unreadable > maxGenInvoices-c.Invoices:
		return fmt.Errorf("%w: Unreadable must be between 0 and %d, got %d", ErrInvalidConfig, maxGenInvoices-c.Invoices, c.Unreadable)
	case c.Mismatches < 0 || c.Mismatches > c.Invoices:
		return fmt.Errorf("%w: Mismatches must be between 0 and Invoices (%d), got %d", ErrInvalidConfig, c.Invoices, c.Mismatches)
	case c.InboxDir == "":
		return fmt.Errorf("%w: InboxDir must be set", ErrInvalidConfig)
	case c.ERPPath == "":
		return fmt.Errorf("%w: ERPPath must be set", ErrInvalidConfig)
	case c.TruthDir == "":
		return fmt.Errorf("%w: TruthDir must be set", ErrInvalidConfig)
	}
	return nil
}

// Generate writes one night: its documents, its purchase orders, receipts and missing
// stock levels in the ERP database, and its ground truth, which it also returns. The
// same config gives byte-identical documents and truth (the truth's stock levels also
// depend on what the warehouse held before). A second Generate for the same warehouse
// and date replaces that night's documents, purchase orders and receipts.
func Generate(ctx context.Context, c GenConfig) (Truth, error) {
	if err := c.Validate(); err != nil {
		return Truth{}, err
	}
	n := planNight(c)
	// The ERP first: it is the one write that can refuse (a PO prefix taken by another
	// night), and then the inbox is left as it was.
	before, err := writeERP(ctx, c, n)
	if err != nil {
		return Truth{}, err
	}
	if err := writeDocuments(ctx, c, n); err != nil {
		return Truth{}, err
	}
	t := n.truth(before)
	if err := writeTruth(c, t); err != nil {
		return Truth{}, err
	}
	return t, nil
}

// night is a generated night in memory.
type night struct {
	cfg       GenConfig
	invoices  []Invoice
	poUnit    [][]int64 // [invoice][line] the purchase order's unit price
	received  [][]int64 // [invoice][line] quantity received
	listPrice map[string]int64
	garbled   []garbledDoc
	adjs      []Adjustment // what gen made wrong, in the order it made it
}

type garbledDoc struct {
	invoiceNo string
	text      []byte
}

// planNight draws the whole night from one PCG stream, in a fixed order: invoices and
// their lines, then which lines mismatch and by how much, then the garbled documents.
func planNight(c GenConfig) *night {
	rng := rand.New(rand.NewPCG(uint64(c.Seed), nightSeed(c.Warehouse, c.Date)))
	cat := catalogue()
	n := &night{cfg: c, listPrice: map[string]int64{}}
	for _, s := range cat {
		for _, it := range s.Items {
			n.listPrice[it.SKU] = it.Paise
		}
	}
	day := strings.ReplaceAll(c.Date, "-", "")
	invW := max(4, len(strconv.Itoa(c.Invoices+c.Unreadable)))
	poW := max(5, len(strconv.Itoa(c.Invoices)))
	prefix := poPrefix(c.Warehouse, c.Date)

	n.invoices = make([]Invoice, c.Invoices)
	n.poUnit = make([][]int64, c.Invoices)
	n.received = make([][]int64, c.Invoices)
	for i := range n.invoices {
		sup := cat[rng.IntN(len(cat))]
		inv := Invoice{
			InvoiceNo:    fmt.Sprintf("INV-%s-%0*d", day, invW, i+1),
			SupplierID:   sup.ID,
			SupplierName: sup.Name,
			Warehouse:    c.Warehouse,
			Date:         c.Date,
			PORef:        fmt.Sprintf("PO-%s-%0*d", prefix, poW, i+1),
		}
		picks := rng.Perm(len(sup.Items))[:1+rng.IntN(5)]
		for j, k := range picks {
			it := sup.Items[k]
			qty := int64(10 * (1 + rng.IntN(50)))
			unit := max(5, roundTo5(it.Paise*int64(95+rng.IntN(11))/100))
			inv.Lines = append(inv.Lines, Line{No: j + 1, SKU: it.SKU, Desc: it.Desc, Qty: qty, UnitPaise: unit})
			n.poUnit[i] = append(n.poUnit[i], unit)
			n.received[i] = append(n.received[i], qty)
		}
		n.invoices[i] = inv
	}

	// Mismatches over distinct lines: a permutation of the flat line index.
	var at []struct{ inv, line int }
	for i, inv := range n.invoices {
		for j := range inv.Lines {
			at = append(at, struct{ inv, line int }{i, j})
		}
	}
	for k, flat := range rng.Perm(len(at))[:c.Mismatches] {
		i, j := at[flat].inv, at[flat].line
		inv, l := n.invoices[i], &n.invoices[i].Lines[j]
		a := Adjustment{InvoiceNo: inv.InvoiceNo, Line: l.No, SupplierID: inv.SupplierID, SKU: l.SKU}
		if k%2 == 0 {
			delta := max(5, roundTo5(l.UnitPaise*int64(2+rng.IntN(14))/100))
			l.UnitPaise += delta
			a.Kind, a.AmountPaise = KindPrice, delta*l.Qty
		} else {
			short := 1 + rng.Int64N(l.Qty/5)
			n.received[i][j] = l.Qty - short
			a.Kind, a.AmountPaise, a.QtyDelta = KindQty, short*n.poUnit[i][j], -short
		}
		a.ValueDeltaPaise = -a.AmountPaise
		n.adjs = append(n.adjs, a)
	}
	for i := range n.invoices {
		inv := &n.invoices[i]
		inv.TotalPaise = 0
		for j := range inv.Lines {
			l := &inv.Lines[j]
			l.AmountPaise = l.Qty * l.UnitPaise
			inv.TotalPaise += l.AmountPaise
		}
	}

	for u := range c.Unreadable {
		n.garbled = append(n.garbled, garbledDoc{
			invoiceNo: fmt.Sprintf("INV-%s-%0*d", day, invW, c.Invoices+u+1),
			text:      garble(rng),
		})
	}
	return n
}

// garble makes text no parser can read: letters and symbols only, so no "Invoice No:"
// line and nothing that starts like a line item.
func garble(rng *rand.Rand) []byte {
	const chars = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz#%&*~^|!?()<>/\\;'\"_-+,    "
	var b []byte
	for range 6 + rng.IntN(8) {
		for range 12 + rng.IntN(50) {
			b = append(b, chars[rng.IntN(len(chars))])
		}
		b = append(b, '\n')
	}
	return b
}

func roundTo5(p int64) int64 { return (p + 2) / 5 * 5 }

// nightSeed mixes the night into the PCG, so two warehouses with one seed differ.
func nightSeed(warehouse, date string) uint64 {
	sum := sha256.Sum256([]byte("cairn-gen\x00" + warehouse + "\x00" + date))
	return binary.BigEndian.Uint64(sum[:8])
}

// poPrefix makes purchase-order numbers unique to a night: PO-<10 hex>-<n>. Only the
// warehouse and date go in, so a second gen of a night (any seed) replaces its own POs.
func poPrefix(warehouse, date string) string {
	sum := sha256.Sum256([]byte(warehouse + "\x00" + date))
	return strings.ToUpper(hex.EncodeToString(sum[:5]))
}

// truth computes the ground truth from what gen itself decided, not from Compare.
func (n *night) truth(before []StockLevel) Truth {
	t := Truth{
		Warehouse: n.cfg.Warehouse, Date: n.cfg.Date, Seed: n.cfg.Seed, Invoices: len(n.invoices),
		Adjustments:       make([]TruthAdjustment, 0, len(n.adjs)),
		DebitNotes:        []TruthDebitNote{},
		StockLevelsBefore: before,
		Parked:            make([]Parked, 0, len(n.garbled)),
	}
	bySup := map[string]int64{}
	level := map[string]StockLevel{}
	for _, l := range before {
		level[l.SKU] = l
	}
	for _, a := range n.adjs {
		t.Adjustments = append(t.Adjustments, TruthAdjustment{KeySuffix: a.KeySuffix(), Adjustment: a})
		bySup[a.SupplierID] += a.AmountPaise
		l := level[a.SKU]
		l.Qty += a.QtyDelta
		l.ValuePaise += a.ValueDeltaPaise
		level[a.SKU] = l
		t.Report.TotalPaise += a.AmountPaise
	}
	slices.SortFunc(t.Adjustments, func(a, b TruthAdjustment) int { return cmp.Compare(a.KeySuffix, b.KeySuffix) })
	for sup, total := range bySup {
		if total > 0 {
			t.DebitNotes = append(t.DebitNotes, TruthDebitNote{SupplierID: sup, TotalPaise: total})
		}
	}
	slices.SortFunc(t.DebitNotes, func(a, b TruthDebitNote) int { return cmp.Compare(a.SupplierID, b.SupplierID) })
	for _, b := range before {
		t.StockLevelsAfter = append(t.StockLevelsAfter, level[b.SKU])
	}
	if t.StockLevelsAfter == nil {
		t.StockLevelsAfter = []StockLevel{}
	}
	for _, g := range n.garbled {
		t.Parked = append(t.Parked, Parked{InvoiceNo: g.invoiceNo, Reason: unreadableReason})
	}
	t.Report.Invoices = len(n.invoices)
	t.Report.Lines = lineCount(n.invoices)
	t.Report.Adjustments = len(n.adjs)
	return t
}
