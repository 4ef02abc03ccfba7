// The timeline chart: one SVG drawn here, no library. Per answered request (a turn): the
// client's full history and the prompt the provider got, in the proxy's tokens; the part the
// provider read from its prompt cache as bars; a marker where each summary started to apply.

const SVG = "http://www.w3.org/2000/svg";
const HEIGHT = 240;
const PAD = { top: 16, right: 16, bottom: 34, left: 56 };

function svg(tag, attrs = {}, text) {
  const node = document.createElementNS(SVG, tag);
  for (const [name, value] of Object.entries(attrs)) node.setAttribute(name, String(value));
  if (text !== undefined) node.textContent = text;
  return node;
}

const count = new Intl.NumberFormat("en");
const compact = new Intl.NumberFormat("en", { notation: "compact", maximumFractionDigits: 1 });

// Where the applied summary changed to a new one (where each summary landed): the index of the
// point and its turn number (`first`: the first point's; the oldest points give way, see the API's max_turns).
export function landings(turns, first = 1) {
  const found = [];
  let previous = null;
  turns.forEach((turn, i) => {
    if (turn.checkpoint && turn.checkpoint !== previous) found.push({ index: i, turn: first + i, id: turn.checkpoint });
    previous = turn.checkpoint;
  });
  return found;
}

export function describe(turns, first = 1) {
  if (!turns.length) return "No answered request recorded yet.";
  const oldest = turns[0];
  const last = turns[turns.length - 1];
  const landed = landings(turns, first);
  const where = landed.length ? ` Summaries applied from turn ${landed.map((l) => l.turn).join(", ")}.` : " No summary applied.";
  return (
    `${turns.length} turns (${first} to ${first + turns.length - 1}). The client's history grew from ${count.format(oldest.full_tokens)} ` +
    `to ${count.format(last.full_tokens)} tokens; the last prompt sent held ` +
    `${count.format(last.sent_tokens)}.${where}`
  );
}

export function timelineChart(turns, width, first = 1) {
  const w = Math.max(280, Math.round(width));
  const plotW = w - PAD.left - PAD.right;
  const plotH = HEIGHT - PAD.top - PAD.bottom;
  const top = Math.max(1, ...turns.map((t) => Math.max(t.full_tokens, t.sent_tokens, t.cached_tokens)));
  const n = turns.length;
  const x = (i) => PAD.left + (n <= 1 ? plotW / 2 : (i * plotW) / (n - 1));
  const y = (v) => PAD.top + plotH - (v / top) * plotH;

  const chart = svg("svg", {
    class: "chart", width: w, height: HEIGHT, viewBox: `0 0 ${w} ${HEIGHT}`,
    role: "img", "aria-labelledby": "chart-title chart-desc",
  });
  chart.append(svg("title", { id: "chart-title" }, "Prompt size per turn"));
  chart.append(svg("desc", { id: "chart-desc" }, describe(turns, first)));

  for (const fraction of [0, 0.5, 1]) {
    const value = Math.round(top * fraction);
    chart.append(svg("line", { class: "grid", x1: PAD.left, x2: w - PAD.right, y1: y(value), y2: y(value) }));
    chart.append(svg("text", { class: "tick", x: PAD.left - 6, y: y(value) + 4, "text-anchor": "end" }, compact.format(value)));
  }
  const bar = Math.max(2, Math.min(18, plotW / Math.max(n, 1) - 2));
  turns.forEach((turn, i) => {
    if (turn.cached_tokens > 0) {
      const h = y(0) - y(turn.cached_tokens);
      chart.append(svg("rect", { class: "cached", x: x(i) - bar / 2, y: y(turn.cached_tokens), width: bar, height: h }));
    }
  });
  for (const { index, turn, id } of landings(turns, first)) {
    const at = x(index);
    const mark = svg("g", { class: "landing" });
    mark.append(svg("line", { x1: at, x2: at, y1: PAD.top, y2: y(0) }));
    mark.append(svg("title", {}, `Summary ${id} applied from turn ${turn}`));
    chart.append(mark);
  }
  const path = (key) => turns.map((t, i) => `${i ? "L" : "M"}${x(i).toFixed(1)},${y(t[key]).toFixed(1)}`).join(" ");
  if (n) {
    chart.append(svg("path", { class: "line full", d: path("full_tokens") }));
    chart.append(svg("path", { class: "line sent", d: path("sent_tokens") }));
    turns.forEach((turn, i) => {
      const dot = svg("circle", { class: "dot sent", cx: x(i), cy: y(turn.sent_tokens), r: 2.5 });
      dot.append(svg("title", {}, `Turn ${first + i}: ${count.format(turn.sent_tokens)} sent of ${count.format(turn.full_tokens)}`));
      chart.append(dot);
    });
  }
  chart.append(svg("line", { class: "axis", x1: PAD.left, x2: w - PAD.right, y1: y(0), y2: y(0) }));
  const label = (i, anchor) => chart.append(svg("text", { class: "tick", x: x(i), y: HEIGHT - PAD.bottom + 16, "text-anchor": anchor }, `turn ${first + i}`));
  if (n) label(0, n === 1 ? "middle" : "start");
  if (n > 1) label(n - 1, "end");
  return chart;
}
