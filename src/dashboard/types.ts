/** One bundled browser asset of the dashboard or the API reference (written by scripts/build.mjs). */
export interface DashboardAsset {
  /** The name it is served under: `admin.<first 16 hex of sha256>.js`. */
  readonly file: string;
  readonly contentType: string;
  /** SHA-256 (hex) of its bytes (src/generated/assets/{page}/assets/{file}): the asset's ETag. */
  readonly sha256: string;
  /** The same digest as a Subresource Integrity value (`sha256-<base64>`). */
  readonly integrity: string;
  readonly bytes: number;
}

/** The four assets: a script and a stylesheet for /admin and for /docs. */
export type DashboardAssets = Readonly<Record<"admin.js" | "admin.css" | "docs.js" | "docs.css", DashboardAsset>>;
