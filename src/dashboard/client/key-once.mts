/**
 * A new API key, shown this once (issue 25 §3, D-080). The gateway returns the key only in the answer to a create
 * or a rotate; the page puts it in one read-only field of `#key-once` with a Copy button and says it will not be
 * shown again. The key lives only in that field: never in storage, a URL, a title or the list. Dismiss, leaving the
 * view (another view, the keys view opened afresh, signing out: admin.mts dispatches VIEW_LEAVE_EVENT), closing the
 * page or showing another key empties the field and removes the notice from the page.
 */
import { h } from "./dom.mts";
import { VIEW_LEAVE_EVENT } from "./view.mts";

/** The notice's slot: `show(keyId, key, what)` puts one key in it; `clear()` takes it out of the page. */
export function onceSlot(): { el: HTMLElement; show(keyId: string, key: string, what: string): void; clear(): void } {
  const el = h("div", { class: "key-once-slot" });
  let field: HTMLInputElement | null = null;

  const clear = () => {
    if (field) field.value = "";
    field = null;
    el.replaceChildren();
    window.removeEventListener(VIEW_LEAVE_EVENT, clear);
    window.removeEventListener("pagehide", clear);
  };

  const show = (keyId: string, key: string, what: string) => {
    clear();
    const input = h("input", {
      id: "key-value",
      type: "text",
      readonly: true,
      autocomplete: "off",
      spellcheck: false,
      "aria-label": "the new key",
    });
    input.value = key; // a property, not an attribute: the key is in no markup the page could serialise
    field = input;
    const copied = h("span", { id: "key-copied", class: "muted", role: "status" });
    const copy = h("button", { id: "key-copy", type: "button" }, "Copy");
    copy.addEventListener("click", () => void copyKey(input, copied));
    const dismiss = h("button", { id: "key-dismiss", type: "button" }, "I have stored it — hide");
    dismiss.addEventListener("click", clear);
    el.append(
      h(
        "section",
        { id: "key-once", role: "alert", "data-key-id": keyId },
        h("h3", {}, `${what} key `, h("code", {}, keyId)),
        h("p", { class: "warn" }, "Copy this key now: it will not be shown again. The gateway keeps only a salted hash of it."),
        h("div", { class: "key-once-row" }, input, copy),
        h("div", { class: "key-once-row" }, copied, dismiss),
      ),
    );
    window.addEventListener(VIEW_LEAVE_EVENT, clear);
    window.addEventListener("pagehide", clear);
  };

  return { el, show, clear };
}

/** The clipboard when the page may write to it; else the field's text selected for the operator to copy. */
async function copyKey(input: HTMLInputElement, status: HTMLElement): Promise<void> {
  try {
    if (!navigator.clipboard) throw new Error("no clipboard");
    await navigator.clipboard.writeText(input.value);
    status.textContent = "Copied to the clipboard.";
    status.setAttribute("data-copied", "clipboard");
  } catch {
    input.focus();
    input.select();
    status.textContent = "Selected: press Ctrl+C (⌘C) to copy.";
    status.setAttribute("data-copied", "selected");
  }
}
