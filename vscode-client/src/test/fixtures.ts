// What the extension's unit tests share: settings as the extension would read them, and the
// package.json it declares them (and its commands) in.
import * as fs from 'node:fs';
import * as path from 'node:path';
import { DEFAULT_SETTINGS, LookaheadSettings, declaredSettings } from '../settings';

/** The default settings with these changed. */
export function settings(overrides: Partial<LookaheadSettings> = {}): LookaheadSettings {
  return { ...DEFAULT_SETTINGS, serverCommand: [], disabledLanguages: [], ...overrides };
}

export const manifest = JSON.parse(fs.readFileSync(path.join(__dirname, '..', '..', 'package.json'), 'utf8'));
/** Every setting package.json declares, as the extension reads them at activation. */
export const declared = declaredSettings(manifest.contributes.configuration.properties);
export type Property = { scope?: string; default?: unknown };
export const properties: Record<string, Property> = manifest.contributes.configuration.properties;
export const contributed: { command: string; title: string; category?: string }[] = manifest.contributes.commands;
