/**
 * Token estimates without a tokenizer: deliberately on the high side, so that
 * a budget check based on them does not let an over-long prompt through.
 * (CJK text costs about one token per character in BPE vocabularies; Latin
 * text about one per four characters; digits, punctuation and code more.)
 */

/** Estimated tokens of `text`. Pure, linear in its length. */
export function estimateTokens(text: string): number {
  let cjk = 0;
  let otherNonAscii = 0;
  let symbols = 0;
  let letters = 0;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c < 0x80) {
      if ((c >= 0x61 && c <= 0x7a) || (c >= 0x41 && c <= 0x5a) || c === 0x20) letters++;
      else symbols++;
    } else if ((c >= 0x3000 && c <= 0x9fff) || (c >= 0xac00 && c <= 0xd7af) || (c >= 0xf900 && c <= 0xfaff)) {
      cjk++;
    } else if (c >= 0xd800 && c <= 0xdbff) {
      // A surrogate pair (emoji, rare CJK): count the pair once, generously.
      otherNonAscii += 2;
      i++;
    } else {
      otherNonAscii++;
    }
  }
  return Math.ceil(letters / 4 + symbols / 2 + cjk * 1.25 + otherNonAscii / 1.5);
}
