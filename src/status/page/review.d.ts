// page/review.js is browser code imported as text (page.ts); it is not type-checked as a module.
declare const text: string;
export default text;
