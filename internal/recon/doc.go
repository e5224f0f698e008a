// Package recon is the reconciliation domain of Cairn's reference night: a distributor
// checks the day's supplier invoices against the stock that reached the warehouse.
//
// # Model
//
// A night is one warehouse on one date. Its invoices arrive as text documents
// (ListDocuments, SourceFingerprint); an Extractor turns each document into an answer
// that is saved word for word, and ParseAnswer checks that answer against the line-item
// schema. MatchLines pairs every invoice line with the purchase-order line of its PO
// reference, Compare sets the matches against what was received and yields the
// adjustments (price or qty), DebitNotes groups the adjustments by supplier, and
// Summarize makes the finance head's report. All of these are pure functions over plain
// data that return their results in a fixed order, so a repeat gives the same bytes.
//
// # Money
//
// Money is int64 paise, never a float. ParsePaise and FormatPaise read and write the
// Indian grouping used on the documents ("12,34,567.50").
//
// # The ERP database
//
// The night's purchase orders, receipts and stock levels live in the ERP database
// (OpenERP opens it, SQLite or PostgreSQL, and CreateERPTables creates its tables);
// LoadPurchaseOrders, LoadReceipts and LoadStockLevels read them.
//
// # Generating a night
//
// Generate writes one night deterministically from a seed: the documents, the ERP rows,
// and the ground truth (Truth) that tests compare a run against, computed by Generate on
// its own rather than by the functions above.
package recon
