// Building the page: elements from data, text always as text (never markup), numbers and
// times as an operator reads them, and the one confirmation dialog every action goes through.

// h("p", {class: "x"}, "text", child...): attributes set as attributes, `on*` as listeners,
// children appended as nodes or text; null and false children are skipped.
export function h(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (name.startsWith("on")) node.addEventListener(name.slice(2), value);
    else if (value === true) node.setAttribute(name, "");
    else node.setAttribute(name, String(value));
  }
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : String(child));
  }
  return node;
}

const integer = new Intl.NumberFormat("en");
export const tokens = (n) => (typeof n === "number" ? integer.format(n) : "–");

export function dollars(amount) {
  if (typeof amount !== "number") return "–";
  const digits = Math.abs(amount) >= 1 ? 2 : 4;
  const text = `$${Math.abs(amount).toFixed(digits)}`;
  return amount < 0 ? `−${text}` : text;
}

export function when(seconds) {
  if (typeof seconds !== "number" || !seconds) return h("span", {}, "–");
  const at = new Date(seconds * 1000);
  const ago = Math.max(0, Date.now() / 1000 - seconds);
  let text;
  if (ago < 60) text = "just now";
  else if (ago < 3600) text = `${Math.floor(ago / 60)} min ago`;
  else if (ago < 86400) text = `${Math.floor(ago / 3600)} h ago`;
  else text = at.toISOString().slice(0, 16).replace("T", " ");
  return h("time", { datetime: at.toISOString(), title: at.toISOString() }, text);
}

export function shortId(id) {
  return id && id.length > 12 ? `${id.slice(0, 10)}…` : id || "–";
}

export function status(text, kind = "info") {
  const line = document.getElementById("status");
  line.textContent = text;
  line.className = `status ${kind}`;
}

// Ask before acting: a modal dialog (keyboard: Tab between its buttons, Escape cancels);
// resolves true only when the operator confirms. Focus returns where it was.
export function confirmAction({ title, text, action }) {
  const dialog = document.getElementById("confirm");
  const ok = document.getElementById("confirm-ok");
  const cancel = document.getElementById("confirm-cancel");
  document.getElementById("confirm-title").textContent = title;
  document.getElementById("confirm-text").textContent = text;
  ok.textContent = action;
  const back = document.activeElement;
  return new Promise((resolve) => {
    const done = (answer) => {
      ok.removeEventListener("click", yes);
      cancel.removeEventListener("click", no);
      dialog.removeEventListener("cancel", no);
      if (dialog.open) dialog.close();
      if (back && back.focus) back.focus();
      resolve(answer);
    };
    const yes = () => done(true);
    const no = (event) => {
      if (event) event.preventDefault();
      done(false);
    };
    ok.addEventListener("click", yes);
    cancel.addEventListener("click", no);
    dialog.addEventListener("cancel", no);
    dialog.showModal();
    cancel.focus(); // the safe choice has the focus: Enter alone never confirms
  });
}
