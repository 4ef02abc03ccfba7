// One conversation: what it cost and saved, its timeline, a summary beside what it replaced,
// its checkpoints, and the admin API's actions on them (correct, restore, forget), each confirmed.

import { landings, timelineChart } from "./chart.js";
import { confirmAction, dollars, h, shortId, status, tokens, when } from "./dom.js";

let redraw = null; // the chart of the page shown, drawn again at the window's new width
window.addEventListener("resize", () => redraw && redraw());

function facts(pairs) {
  return h("dl", { class: "facts" }, pairs.map(([term, value]) => h("div", {}, h("dt", {}, term), h("dd", {}, value))));
}

function totals(ledger, record) {
  if (!ledger) return h("p", { class: "empty" }, "No answered request priced yet.");
  return facts([
    ["Requests", tokens(ledger.requests)],
    ["Tokens sent", tokens(ledger.prompt_tokens)],
    ["Of which cached", tokens(ledger.cached_tokens)],
    ["Full history", tokens(ledger.full_prompt_tokens)],
    ["Spent", dollars(ledger.total_spent)],
    ["Saved (net)", dollars(ledger.saved)],
    ["Summaries", String(record ? record.checkpoints.length : 0)],
    ["Last request", when(ledger.last_request_at)],
  ]);
}

function timeline(turns, first) {
  const box = h("div", { class: "chart-box" });
  const section = h("section", { "aria-labelledby": "timeline-title" },
    h("h2", { id: "timeline-title" }, "Timeline"));
  if (!turns.length) {
    redraw = null;
    section.append(h("p", { class: "empty" },
      "No turn recorded yet: a turn is recorded when the provider's answer reports its usage."));
    return section;
  }
  redraw = () => box.replaceChildren(timelineChart(turns, box.clientWidth || 640, first));
  const landed = new Map(landings(turns, first).map((l) => [l.index, l]));
  const table = h("table", { class: "turns" },
    h("caption", {}, "Each turn: the client's history, the prompt sent, what the provider billed and read from its cache"),
    h("thead", {}, h("tr", {}, ["Turn", "Messages", "Full history", "Sent", "Billed", "Cached", "Summary"].map((c) => h("th", { scope: "col" }, c)))),
    h("tbody", {}, turns.map((t, i) => h("tr", {},
      h("th", { scope: "row" }, String(first + i)),
      h("td", {}, tokens(t.messages)), h("td", {}, tokens(t.full_tokens)), h("td", {}, tokens(t.sent_tokens)),
      h("td", {}, tokens(t.billed_tokens)), h("td", {}, tokens(t.cached_tokens)),
      h("td", {}, t.checkpoint ? `${shortId(t.checkpoint)}${landed.has(i) ? " (new)" : ""}` : "–")))));
  section.append(
    box,
    h("ul", { class: "legend" },
      h("li", { class: "full" }, "Client's full history"),
      h("li", { class: "sent" }, "Prompt sent"),
      h("li", { class: "cached" }, "Read from the provider's cache"),
      h("li", { class: "landing" }, "A summary starts to apply")),
    h("details", {}, h("summary", {}, "The timeline as a table"), h("div", { class: "scroll" }, table)));
  return section;
}

function replaced(original) {
  if (original === null) return h("p", { class: "empty" }, "Not kept: nothing this conversation lost to compaction is kept (recall is off, or nothing was removed yet).");
  const items = original.data || original.originals || original.messages || original.items;
  if (!Array.isArray(items)) return h("pre", { class: "text" }, JSON.stringify(original, null, 2));
  return h("ol", { class: "originals" }, items.map((item) => {
    const text = typeof item.content === "string" ? item.content
      : typeof item.text === "string" ? item.text : JSON.stringify(item.content ?? item, null, 2);
    return h("li", {}, h("span", { class: "role" }, item.handle || item.role || item.kind || "item"), h("pre", { class: "text" }, text));
  }));
}

// Runs an action's handler; a refusal of the API (a summary too long, a store down) is told in
// the status line instead of lost.
function guarded(handler) {
  return async (event) => {
    try {
      await handler(event);
    } catch (problem) {
      status(problem.message, "error");
    }
  };
}

function summaryPanel(calls, id, checkpoint, current, original, reload) {
  const editor = h("form", { class: "editor", id: "summary-editor", method: "post", hidden: true },
    h("label", { for: "summary-text" }, "Corrected summary"),
    h("textarea", { id: "summary-text", rows: "10" }, checkpoint.summary),
    h("div", { class: "actions" },
      h("button", { type: "button", class: "quiet", onclick: () => { editor.hidden = true; edit.setAttribute("aria-expanded", "false"); edit.focus(); } }, "Cancel"),
      h("button", { type: "submit" }, "Save correction…")));
  const edit = h("button", {
    type: "button", "aria-expanded": "false", "aria-controls": "summary-editor",
    onclick: () => { editor.hidden = false; edit.setAttribute("aria-expanded", "true"); editor.querySelector("textarea").focus(); },
  }, "Edit summary");
  editor.addEventListener("submit", (event) => event.preventDefault());
  editor.addEventListener("submit", guarded(async () => {
    const text = editor.querySelector("textarea").value;
    const sure = await confirmAction({
      title: "Save the corrected summary?",
      text: "It becomes the current summary, sent in place of the old one from the conversation's next request on; the old one stays in the history.",
      action: "Save correction",
    });
    if (!sure) return;
    const made = await calls.correct(id, checkpoint.id, text);
    await reload(made.checkpoint.id);
    status(`Summary corrected: checkpoint ${made.checkpoint.id} is current.`, "ok");
  }));
  const state = checkpoint.id === current ? "current" : checkpoint.retired ? "retired" : "older";
  return h("section", { class: "pair", "aria-labelledby": "summary-title" },
    h("h2", { id: "summary-title", class: "wide" }, "Summary"),
    h("div", { class: "panel" },
      h("h3", {}, `Checkpoint ${checkpoint.id} (${state})`),
      facts([
        ["Covers", `messages 1 to ${checkpoint.covered_messages}`],
        ["Summary", `${tokens(checkpoint.summary_tokens)} tokens`],
        ["Replaced", `${tokens(checkpoint.dropped_tokens)} tokens (${tokens(checkpoint.dropped_messages)} messages)`],
        ["Made by", `${checkpoint.strategy}${checkpoint.model ? `, ${checkpoint.model}` : ""}`],
        ["Made", when(checkpoint.created_at)],
      ]),
      h("pre", { class: "text summary", tabindex: "0", "aria-label": "Summary text" }, checkpoint.summary),
      edit, editor),
    h("div", { class: "panel" }, h("h3", {}, "What it replaced"), original));
}

function checkpoints(calls, id, record, selected, reload) {
  const rows = record.checkpoints.map((c) => {
    const state = c.id === record.current ? "current" : c.retired ? "retired" : "";
    const restore = guarded(async () => {
      const sure = await confirmAction({
        title: `Restore checkpoint ${c.id}?`,
        text: "It becomes current for every request of this conversation from now on; the checkpoints built on it are set aside (kept, never applied).",
        action: "Restore",
      });
      if (!sure) return;
      await calls.restore(id, c.id);
      await reload(c.id);
      status(`Checkpoint ${c.id} is current again.`, "ok");
    });
    return h("tr", { class: c.id === selected ? "selected" : null },
      h("th", { scope: "row" }, h("code", {}, c.id)),
      h("td", { "data-label": "Covers" }, `${c.covered_messages} messages`),
      h("td", { "data-label": "Tokens" }, tokens(c.summary_tokens)),
      h("td", { "data-label": "Made by" }, c.strategy),
      h("td", { "data-label": "Made" }, when(c.created_at)),
      h("td", { "data-label": "State" }, state || "–"),
      h("td", { class: "buttons" },
        h("button", { type: "button", class: "quiet", "aria-label": `Show checkpoint ${c.id}`, onclick: guarded(() => reload(c.id)) }, "Show"),
        state === "current" ? null : h("button", { type: "button", "aria-label": `Restore checkpoint ${c.id}`, onclick: restore }, "Restore…")));
  });
  return h("section", { "aria-labelledby": "checkpoints-title" },
    h("h2", { id: "checkpoints-title" }, "Checkpoints"),
    h("div", { class: "scroll" }, h("table", { class: "checkpoints" },
      h("caption", {}, "Newest (or last restored) first"),
      h("thead", {}, h("tr", {}, ["Checkpoint", "Covers", "Tokens", "Made by", "Made", "State", "Actions"].map((c) => h("th", { scope: "col" }, c)))),
      h("tbody", {}, rows))));
}

function forgetting(calls, id) {
  const forget = guarded(async () => {
    const sure = await confirmAction({
      title: `Forget conversation ${id}?`,
      text: "Its summaries and ledger are deleted; its next request starts without a summary. The client's history is not touched.",
      action: "Forget",
    });
    if (!sure) return;
    await calls.forget(id);
    status(`Conversation ${id} forgotten.`, "ok");
    location.hash = "#/";
  });
  return h("section", { class: "danger", "aria-labelledby": "forget-title" },
    h("h2", { id: "forget-title" }, "Forget"),
    h("button", { type: "button", class: "danger", onclick: forget }, "Forget this conversation…"));
}

export async function conversationPage(id, { show, api: calls }, selected = null) {
  const [record, ledger, timelineData] = await Promise.all([calls.record(id), calls.ledger(id), calls.timeline(id)]);
  const turns = (timelineData && timelineData.turns) || [];
  const back = h("p", { class: "back" }, h("a", { href: "#/" }, "← All conversations"));
  if (!record && !ledger && !turns.length) {
    show(id, back, h("p", { class: "empty" }, "No such conversation for this tenant."));
    return;
  }
  const first = Math.max(1, (ledger ? ledger.requests : turns.length) - turns.length + 1);
  const reload = (chosen) => conversationPage(id, { show, api: calls }, chosen);
  const parts = [back, h("section", { "aria-labelledby": "totals-title" }, h("h2", { id: "totals-title" }, "Totals"), totals(ledger, record)), timeline(turns, first)];
  if (record && record.checkpoints.length) {
    const shown = record.checkpoints.find((c) => c.id === (selected || record.current)) || record.checkpoints[0];
    const original = h("div", { "aria-live": "polite" }, h("p", { class: "empty" }, "Loading…"));
    // Filled once it answers: the rest of the page does not wait for it.
    calls.originals(id).catch(() => null).then((found) => original.replaceChildren(replaced(found)));
    parts.push(summaryPanel(calls, id, shown, record.current, original, reload), checkpoints(calls, id, record, shown.id, reload));
  } else {
    parts.push(h("p", { class: "empty" }, "No summary stored yet."));
  }
  parts.push(forgetting(calls, id));
  show(id, ...parts);
  if (redraw) redraw();
}
