package bench

import (
	"bytes"
	"fmt"
	"image/color"
	"io"
	"os"
	"path/filepath"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/text"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// Figure lays panels side by side under a title, with a legend to their
// right (outside the data) and caption lines below: what was measured,
// on what machine, when.
type Figure struct {
	Title   string
	Panels  []*plot.Plot
	Legend  *plot.Legend
	Caption []string
	// Width and Height default to 9 x 4.5 inches (900 x 450 px in the
	// PNG), readable at a README's width.
	Width, Height vg.Length
}

// Draw draws the figure onto c.
func (f Figure) Draw(c draw.Canvas) {
	c.SetColor(color.White)
	c.Fill(c.Rectangle.Path())
	pad := vg.Points(6)
	c = draw.Crop(c, pad, -pad, pad, -pad)
	if f.Title != "" {
		sty := text.Style{Color: color.Black, Font: font.From(plot.DefaultFont, 14), Handler: plot.DefaultTextHandler, XAlign: draw.XCenter, YAlign: draw.YTop}
		c.FillText(sty, vg.Point{X: c.Center().X, Y: c.Max.Y}, f.Title)
		c.Max.Y -= sty.Rectangle(f.Title).Size().Y + pad
	}
	if len(f.Caption) > 0 {
		sty := text.Style{Color: color.Gray{Y: 60}, Font: font.From(plot.DefaultFont, 9), Handler: plot.DefaultTextHandler}
		h := sty.Rectangle("Mg").Size().Y * 1.2
		for i, line := range f.Caption {
			c.FillText(sty, vg.Point{X: c.Min.X, Y: c.Min.Y + h*vg.Length(len(f.Caption)-1-i)}, line)
		}
		c.Min.Y += h*vg.Length(len(f.Caption)) + pad
	}
	if f.Legend != nil {
		l := *f.Legend
		l.Top, l.Left = true, true
		l.TextStyle.Font.Size = vg.Points(10)
		r := l.Rectangle(c)
		w := r.Max.X - r.Min.X + pad
		l.Draw(draw.Crop(c, c.Max.X-c.Min.X-w+pad, 0, 0, 0))
		c.Max.X -= w + pad
	}
	if len(f.Panels) == 0 {
		return
	}
	tiles := draw.Tiles{Rows: 1, Cols: len(f.Panels), PadX: vg.Points(14)}
	cs := plot.Align([][]*plot.Plot{f.Panels}, tiles, c)
	for i, p := range f.Panels {
		p.Draw(cs[0][i])
	}
}

func (f Figure) size() (vg.Length, vg.Length) {
	w, h := f.Width, f.Height
	if w == 0 {
		w = 9 * vg.Inch
	}
	if h == 0 {
		h = 4.5 * vg.Inch
	}
	return w, h
}

// WriteTo renders the figure as format ("svg" or "png") to w.
func (f Figure) WriteTo(w io.Writer, format string) error {
	wd, ht := f.size()
	cv, err := draw.NewFormattedCanvas(wd, ht, format)
	if err != nil {
		return fmt.Errorf("bench: figure canvas: %w", err)
	}
	f.Draw(draw.New(cv))
	if _, err := cv.WriteTo(w); err != nil {
		return fmt.Errorf("bench: write figure: %w", err)
	}
	return nil
}

// Save writes the figure as name.svg and name.png in dir and returns the
// files written.
func (f Figure) Save(dir, name string) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("bench: plot dir: %w", err)
	}
	var files []string
	for _, ext := range []string{"svg", "png"} {
		var buf bytes.Buffer
		if err := f.WriteTo(&buf, ext); err != nil {
			return files, err
		}
		file := filepath.Join(dir, name+"."+ext)
		if err := os.WriteFile(file, buf.Bytes(), 0o644); err != nil {
			return files, fmt.Errorf("bench: save %s: %w", file, err)
		}
		files = append(files, file)
	}
	return files, nil
}

// savePlot writes one panel as a figure with its own legend.
func savePlot(p *plot.Plot, dir, name string, caption ...string) ([]string, error) {
	return Figure{Panels: []*plot.Plot{p}, Caption: caption, Width: 7 * vg.Inch}.Save(dir, name)
}
