// The component's entry: `jco componentize` builds it, dagr calls `task`.
import * as host from 'dagr:plugin/host@0.1.0';
import { exportTask } from '@dagr/sdk';
import spec from './task.js';

export const task = exportTask(spec, host);
