package main

import (
	"fmt"
	"html"
	"math"
	"strings"
	"unicode/utf8"
)

// series is one bar of each group of a bar chart.
type series struct {
	name   string
	values []float64
}

// line is one line of a line chart.
type line struct {
	name   string
	points [][2]float64
}

// palette colours the series in order.
var palette = []string{"#4e79a7", "#e15759", "#76b7b2", "#f28e2b", "#59a14f"}

const (
	width, height         = 760, 380
	left, right, top, bot = 70, 20, 40, 70
)

// canvas collects an SVG document.
type canvas struct{ strings.Builder }

func (c *canvas) f(format string, a ...any) { fmt.Fprintf(c, format, a...) }

func (c *canvas) text(x, y float64, anchor, size, s string) {
	c.f(`<text x="%.1f" y="%.1f" text-anchor="%s" font-size="%s">%s</text>`+"\n", x, y, anchor, size, esc(s))
}

// start opens the document with its title and y axis, scaled to ymax.
func (c *canvas) start(title, ylabel string, ymax float64) {
	c.f(`<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif">`+"\n", width, height, width, height)
	c.f(`<rect width="100%%" height="100%%" fill="white"/>` + "\n")
	c.text(width/2, 22, "middle", "15", title)
	c.f(`<text x="16" y="%d" text-anchor="middle" font-size="12" transform="rotate(-90 16 %d)">%s</text>`+"\n",
		(top+height-bot)/2, (top+height-bot)/2, esc(ylabel))
	step := niceStep(ymax / 5)
	for v := 0.0; v <= ymax+step/1e6; v += step {
		y := yOf(v, ymax)
		c.f(`<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#ddd"/>`+"\n", left, width-right, y, y)
		c.text(left-6, y+4, "end", "11", trim(v))
	}
	c.f(`<line x1="%d" x2="%d" y1="%d" y2="%d" stroke="#333"/>`+"\n", left, width-right, height-bot, height-bot)
}

// legend names the series, left to right under the plot.
func (c *canvas) legend(names []string, mark string) {
	x := float64(left)
	for i, n := range names {
		c.f(`<rect x="%.1f" y="%d" width="12" height="12" fill="%s"/>`+"\n", x, height-22, palette[i%len(palette)])
		c.text(x+16, height-12, "start", "12", n)
		x += 24 + 7*float64(len(n))
	}
	if mark != "" {
		c.f(`<line x1="%.1f" x2="%.1f" y1="%d" y2="%d" stroke="#000" stroke-dasharray="4 3" stroke-width="2"/>`+"\n", x, x+18, height-16, height-16)
		c.text(x+22, height-12, "start", "12", mark)
	}
}

func yOf(v, ymax float64) float64 {
	return float64(height-bot) - v/ymax*float64(height-bot-top)
}

// barChart draws groups of bars, one per series, with an optional mark
// (a dashed line) over each group.
// barChart draws groups of bars, one per series; a value NaN draws
// nothing (the series does not apply to the group), a negative one the
// word "none" (it applies, and there was nothing to measure).
func barChart(title, ylabel string, groups []string, ss []series, marks []float64, mark string) string {
	ymax := 0.0
	for _, s := range ss {
		for _, v := range s.values {
			if !math.IsNaN(v) {
				ymax = math.Max(ymax, v)
			}
		}
	}
	for _, m := range marks {
		ymax = math.Max(ymax, m)
	}
	ymax = niceMax(ymax)
	var c canvas
	c.start(title, ylabel, ymax)
	gw := float64(width-left-right) / float64(len(groups))
	bw := gw * 0.8 / float64(max(len(ss), 1))
	for g, name := range groups {
		x0 := float64(left) + gw*float64(g) + gw*0.1
		for i, s := range ss {
			if g >= len(s.values) {
				continue
			}
			v := s.values[g]
			switch {
			case math.IsNaN(v): // does not apply
				continue
			case v < 0: // nothing to measure: said, no bar
				c.text(x0+bw*float64(i)+bw/2-1, float64(height-bot)-3, "middle", "10", "none")
				continue
			}
			y := yOf(v, ymax)
			c.f(`<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"><title>%s: %s</title></rect>`+"\n",
				x0+bw*float64(i), y, bw-2, float64(height-bot)-y, palette[i%len(palette)], esc(s.name), trim(v))
			c.text(x0+bw*float64(i)+bw/2-1, y-3, "middle", "10", trim(v))
		}
		if g < len(marks) && marks[g] > 0 {
			y := yOf(marks[g], ymax)
			c.f(`<line x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f" stroke="#000" stroke-dasharray="4 3" stroke-width="2"/>`+"\n", x0-2, x0+gw*0.8, y, y)
		}
		c.text(x0+gw*0.4, float64(height-bot)+16, "middle", "12", name)
	}
	c.end(namesOf(ss, func(s series) string { return s.name }), mark)
	return c.String()
}

// lineChart draws lines over a linear x axis, with an optional level
// (a dashed line at y = level).
func lineChart(title, xlabel, ylabel string, lines []line, level float64, mark string) string {
	xmax, ymax := 0.0, level
	for _, l := range lines {
		for _, p := range l.points {
			xmax, ymax = math.Max(xmax, p[0]), math.Max(ymax, p[1])
		}
	}
	xmax, ymax = niceMax(xmax), niceMax(ymax)
	var c canvas
	c.start(title, ylabel, ymax)
	xOf := func(v float64) float64 { return float64(left) + v/xmax*float64(width-left-right) }
	step := niceStep(xmax / 5)
	for v := 0.0; v <= xmax+step/1e6; v += step {
		c.text(xOf(v), float64(height-bot)+16, "middle", "11", trim(v))
	}
	c.text(float64(width)/2, float64(height-bot)+34, "middle", "12", xlabel)
	for i, l := range lines {
		var pts []string
		for _, p := range l.points {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", xOf(p[0]), yOf(p[1], ymax)))
			c.f(`<circle cx="%.1f" cy="%.1f" r="3.5" fill="%s"><title>%s: %s at %s</title></circle>`+"\n",
				xOf(p[0]), yOf(p[1], ymax), palette[i%len(palette)], esc(l.name), trim(p[1]), trim(p[0]))
		}
		c.f(`<polyline points="%s" fill="none" stroke="%s" stroke-width="2"/>`+"\n", strings.Join(pts, " "), palette[i%len(palette)])
	}
	if level > 0 {
		y := yOf(level, ymax)
		c.f(`<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#000" stroke-dasharray="4 3" stroke-width="2"/>`+"\n", left, width-right, y, y)
	}
	c.end(namesOf(lines, func(l line) string { return l.name }), mark)
	return c.String()
}

// end closes the document, under its legend.
func (c *canvas) end(names []string, mark string) {
	c.legend(names, mark)
	c.f("</svg>\n")
}

// namesOf returns the name of each of xs.
func namesOf[T any](xs []T, name func(T) string) []string {
	out := make([]string, len(xs))
	for i, x := range xs {
		out[i] = name(x)
	}
	return out
}

// esc makes s fit for an SVG document's text: escaped, valid UTF-8, and
// without the characters XML does not allow (the labels come from the
// drivers' output, which could hold anything).
func esc(s string) string {
	s = strings.Map(func(r rune) rune {
		if r == utf8.RuneError || r < 0x20 && r != '\t' || r == 0xFFFE || r == 0xFFFF {
			return -1
		}
		return r
	}, strings.ToValidUTF8(s, ""))
	return html.EscapeString(s)
}

// niceMax rounds v up to a round number for an axis's end.
func niceMax(v float64) float64 {
	if v <= 0 {
		return 1
	}
	s := niceStep(v / 5)
	return math.Ceil(v*1.08/s) * s
}

// niceStep returns 1, 2 or 5 times a power of ten, at least v.
func niceStep(v float64) float64 {
	if v <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= v {
			return m * p
		}
	}
	return 10 * p
}

// trim formats v with no more digits than it needs.
func trim(v float64) string {
	switch {
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	case v >= 10:
		return strings.TrimSuffix(fmt.Sprintf("%.1f", v), ".0")
	}
	return strings.TrimSuffix(strings.TrimRight(fmt.Sprintf("%.2f", v), "0"), ".")
}
