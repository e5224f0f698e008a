package recon

import "fmt"

// supplier is one of gen's suppliers with the SKUs it alone sells.
type supplier struct {
	ID, Name string
	Items    []catalogueItem
}

type catalogueItem struct {
	SKU, Desc string
	Paise     int64 // list price per piece
}

// family is a product in several sizes: sku and desc are formats taking the size.
type family struct {
	sku, desc  string
	sizes      []string
	base, step int64 // price of the first size, and the rise per size
}

// catalogue returns gen's fixed catalogue: 24 suppliers, 143 SKUs, each SKU sold by one
// supplier. It is built afresh on each call, so nothing package-level can change it.
func catalogue() []supplier {
	s := func(name string, fams ...family) supplier { return supplier{Name: name, Items: items(fams)} }
	f := func(sku, desc string, base, step int64, sizes ...string) family {
		return family{sku: sku, desc: desc, sizes: sizes, base: base, step: step}
	}
	sups := []supplier{
		s("Agarwal Fasteners",
			f("SCREW-%s", "Wood screw %s", 150, 60, "4X25", "4X40", "5X50", "6X75"),
			f("WASHER-%s", "Flat washer %s", 40, 20, "M6", "M8", "M10")),
		s("Bharat Hardware Mart",
			f("NAIL-%s", "Wire nail %s mm", 20, 10, "25", "50", "75", "100"),
			f("ANCHOR-%s", "Wall anchor %s mm", 300, 150, "6", "8", "10")),
		s("Chawla Pipes & Fittings",
			f("PIPE-PVC-%s", "PVC pipe %s mm 3 m", 18000, 6000, "20", "25", "32", "40"),
			f("ELBOW-%s", "PVC elbow %s mm", 2500, 900, "20", "25", "32")),
		s("Deshmukh Electricals",
			f("SWITCH-%s", "Modular switch %s", 8500, 3000, "6A", "16A"),
			f("SOCKET-%s", "Modular socket %s", 12000, 4500, "6A", "16A"),
			f("MCB-%s", "MCB single pole %s", 24000, 6000, "16A", "32A")),
		s("Ganga Paints",
			f("PAINT-EMUL-%s", "Emulsion paint %s", 42000, 110000, "1L", "4L", "10L"),
			f("PRIMER-%s", "Wall primer %s", 28000, 80000, "1L", "4L")),
		s("Hind Tools Corporation",
			f("SPANNER-%s", "Double end spanner %s", 9500, 2500, "8X10", "12X13", "14X15", "17X19"),
			f("PLIER-%s", "Combination plier %s mm", 21000, 6000, "150", "200")),
		s("Sharma Steel Works",
			f("BOLT-M8-%s", "Hex bolt M8x%s", 1000, 250, "30", "50", "75"),
			f("BOLT-M10-%s", "Hex bolt M10x%s", 1800, 400, "50", "75"),
			f("NUT-M%s", "Hex nut M%s", 250, 75, "6", "8", "10", "12")),
		s("Jain Adhesives",
			f("GLUE-%s", "Synthetic adhesive %s", 6500, 18000, "100G", "500G", "1KG"),
			f("TAPE-%s", "Masking tape %s", 4500, 3000, "24MM", "48MM")),
		s("Kapoor Cables",
			f("WIRE-%sSQ", "Copper wire %s sq mm 90 m", 95000, 60000, "1", "2", "4", "6"),
			f("CABLE-TIE-%s", "Cable tie %s mm", 90, 60, "100", "200", "300")),
		s("Lakshmi Bearings",
			f("BRG-%s", "Ball bearing %s", 11000, 2200, "6201", "6202", "6203", "6204", "6205")),
		s("Mehta Valves",
			f("VALVE-BALL-%s", "Brass ball valve %s mm", 32000, 14000, "15", "20", "25"),
			f("VALVE-GATE-%s", "Gate valve %s mm", 78000, 30000, "25", "40")),
		s("Narmada Plastics",
			f("BUCKET-%sL", "Plastic bucket %s litre", 9000, 3500, "10", "15", "20"),
			f("CRATE-%s", "Plastic crate %s", 22000, 9000, "SM", "MD", "LG")),
		s("Oberoi Safety Gear",
			f("GLOVE-%s", "Safety gloves size %s", 6500, 0, "S", "M", "L"),
			f("HELMET-%s", "Safety helmet %s", 24000, 0, "WHT", "YEL", "RED")),
		s("Patel Packaging",
			f("BOX-%s", "Corrugated box %s", 2800, 1700, "3PLY", "5PLY", "7PLY"),
			f("STRAP-%s", "PP strap roll %s mm", 60000, 15000, "12", "15")),
		s("Qureshi Welding Supplies",
			f("ROD-E6013-%s", "Welding rod E6013 %s mm packet", 38000, 12000, "2", "3", "4"),
			f("DISC-CUT-%s", "Cutting disc %s mm", 3500, 2000, "100", "125", "180")),
		s("Reddy Abrasives",
			f("SANDPAPER-%s", "Sandpaper grit %s", 1200, 0, "80", "120", "180", "240"),
			f("FLAP-%s", "Flap disc grit %s", 6500, 0, "40", "60", "80")),
		s("Sethi Lubricants",
			f("OIL-%s", "Machine oil %s", 32000, 120000, "1L", "5L"),
			f("GREASE-%s", "Lithium grease %s", 21000, 18000, "500G", "1KG", "5KG")),
		s("Thakur Chains & Ropes",
			f("CHAIN-%s", "Link chain %s mm per metre", 14000, 6000, "6", "8", "10"),
			f("ROPE-%s", "Nylon rope %s mm per metre", 2500, 1000, "8", "10", "12")),
		s("Usha Lighting",
			f("LED-BULB-%sW", "LED bulb %s W", 9900, 3000, "9", "12", "15"),
			f("LED-TUBE-%sW", "LED tube %s W", 29000, 9000, "20", "36")),
		s("Verma Sanitaryware",
			f("TAP-%s", "Pillar tap %s", 65000, 20000, "CP", "SS"),
			f("SHOWER-%s", "Overhead shower %s mm", 42000, 15000, "100", "150", "200")),
		s("Wadhwa Locks",
			f("LOCK-PAD-%s", "Padlock %s mm", 18000, 9000, "40", "50", "65"),
			f("LOCK-MORT-%s", "Mortise lock %s lever", 120000, 40000, "6", "8")),
		s("Yadav Rubber Products",
			f("HOSE-%s", "Rubber hose %s mm per metre", 6500, 3500, "12", "19", "25"),
			f("GASKET-%s", "Rubber gasket %s mm", 1500, 900, "25", "50", "80")),
		s("Zaveri Hinges",
			f("HINGE-%s", "Butt hinge %s mm", 4500, 2500, "75", "100", "125"),
			f("HINGE-CONC-%s", "Concealed hinge %s crank", 8500, 1500, "0", "8", "15")),
		s("Iyer Switchgear",
			f("CONTACTOR-%sA", "Contactor %s A", 145000, 35000, "9", "12", "18", "25"),
			f("RELAY-%sA", "Overload relay %s A", 165000, 30000, "9", "18")),
	}
	for i := range sups {
		sups[i].ID = fmt.Sprintf("SUP-%02d", i+1)
	}
	return sups
}

func items(fams []family) []catalogueItem {
	var out []catalogueItem
	for _, f := range fams {
		for i, size := range f.sizes {
			out = append(out, catalogueItem{
				SKU:   fmt.Sprintf(f.sku, size),
				Desc:  fmt.Sprintf(f.desc, size),
				Paise: f.base + int64(i)*f.step,
			})
		}
	}
	return out
}

// warehouseName is the name a document's "Bill To" gives the warehouse.
func warehouseName(code string) string {
	switch code {
	case "ldh":
		return "Ludhiana Warehouse"
	case "del":
		return "Delhi Warehouse"
	case "bom":
		return "Mumbai Warehouse"
	case "blr":
		return "Bengaluru Warehouse"
	case "maa":
		return "Chennai Warehouse"
	case "ccu":
		return "Kolkata Warehouse"
	}
	return "Warehouse " + code
}
